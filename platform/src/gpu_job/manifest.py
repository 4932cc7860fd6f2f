"""What a project's promote records about the files of a version it registers, and how its predict checks them
before loading.

Promote writes a manifest, `promotion/manifest.json` in the version's run: the SHA-256 of every file predict may
load (which files those are is the project's: its export layout), by its path in the run's artifacts. The
manifest's own SHA-256 is a tag of the model version (MANIFEST_TAG). The tag lives in MLflow, where only promote
may write on the served model; the files live in the bucket. Predict downloads the manifest, checks it against the
tag, then checks every file it downloaded against the manifest, and loads nothing unless all match: a file
changed, missing or added after promotion (by anything with write access to the artifacts) is refused.

Why a manifest and not the list itself as the tag: MLflow 3.17 allows 100,000 characters in a model version tag's
value (MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH, mlflow/utils/validation.py), while a SavedModel's tree has no bound on
its files (assets: a vocabulary, lookup tables), so the list may not fit; the 64-character digest of the manifest
always does, and pins the list as firmly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpu_job.errors import FilesChanged

MANIFEST_PATH = "promotion/manifest.json"
MANIFEST_TAG = "files.manifest_sha256"
_FORMAT = 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as body:
        for block in iter(lambda: body.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_under(root: Path, prefix: str) -> list[str]:
    """Artifact paths (posix, relative to `root`) of every file at or under `root/prefix`, sorted."""
    start = root / prefix
    if start.is_file():
        return [prefix]
    return sorted(p.relative_to(root).as_posix() for p in start.rglob("*") if p.is_file())


def manifest(root: Path, paths: Iterable[str]) -> bytes:
    """The manifest of `paths` under `root`: canonical JSON (sorted keys, no spaces), so it hashes the same
    wherever it is written."""
    files = {path: sha256_file(root / path) for path in sorted(paths)}
    return json.dumps({"format": _FORMAT, "files": files}, sort_keys=True, separators=(",", ":")).encode()


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def read_manifest(body: bytes, tag: str) -> dict[str, str]:
    """The manifest's files when its SHA-256 is `tag`; FilesChanged naming the manifest otherwise."""
    if digest(body) != tag:
        raise FilesChanged(MANIFEST_PATH, f"does not match the tag {MANIFEST_TAG} ({tag[:16]}...)")
    try:
        files = json.loads(body)["files"]
    except (ValueError, KeyError, TypeError):
        raise FilesChanged(MANIFEST_PATH, "is not a manifest promote wrote") from None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise FilesChanged(MANIFEST_PATH, "is not a manifest promote wrote")
    return files


def verify(root: Path, recorded: Mapping[str, str], wanted: Iterable[str]) -> list[str]:
    """Check what was downloaded to `root` for the artifact paths `wanted` (files, or folders such as the
    SavedModel's) against the recorded digests: every recorded file under them present and equal, no other file
    there. Returns the files checked; raises FilesChanged naming the first file that differs."""
    checked = []
    for prefix in wanted:
        recorded_here = sorted(p for p in recorded if p == prefix or p.startswith(prefix + "/"))
        present = files_under(root, prefix) if (root / prefix).exists() else []
        if not recorded_here:
            raise FilesChanged(prefix, "is not among the files promote recorded for this version")
        for path in present:
            if path not in recorded:
                raise FilesChanged(
                    path, "is not among the files promote recorded for this version (it was added)"
                )
        for path in recorded_here:
            if not (root / path).is_file():
                raise FilesChanged(path, "is missing (promote recorded it)")
            found = sha256_file(root / path)
            if found != recorded[path]:
                raise FilesChanged(
                    path,
                    f"does not match its recorded SHA-256 (recorded {recorded[path][:16]}..., found {found[:16]}...)",
                )
            checked.append(path)
    return checked
