"""The served files' manifest (gpu_job.manifest): what promote records and predict checks before it loads anything.
A file changed, missing or added after promotion, and a manifest that is not the one the tag names, are each
refused with the file named (the threat model's rows on the served version's files: manual/security.md)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gpu_job import manifest
from gpu_job.errors import FilesChanged

# A run's artifacts as a project's promote downloads them: a model folder with a nested file, and two files.
FILES = {
    "exports/saved_model/saved_model.pb": b"graph",
    "exports/saved_model/variables/variables.index": b"index",
    "exports/model.tflite": b"flat",
    "exports/class_names.json": b'["0", "1"]',
}


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    for path, body in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(body)
    return tmp_path


def recorded(root: Path) -> dict[str, str]:
    body = manifest.manifest(root, FILES)
    return manifest.read_manifest(body, manifest.digest(body))


def test_the_manifest_is_canonical_json_of_every_files_sha256(artifacts: Path) -> None:
    body = manifest.manifest(artifacts, reversed(list(FILES)))
    assert body == manifest.manifest(artifacts, FILES)  # the order given changes nothing
    assert json.loads(body) == {
        "format": 1,
        "files": {path: hashlib.sha256(content).hexdigest() for path, content in FILES.items()},
    }
    assert b" " not in body and manifest.digest(body) == hashlib.sha256(body).hexdigest()


def test_files_under_lists_a_folder_recursively_or_one_file(artifacts: Path) -> None:
    assert manifest.files_under(artifacts, "exports/saved_model") == [
        "exports/saved_model/saved_model.pb",
        "exports/saved_model/variables/variables.index",
    ]
    assert manifest.files_under(artifacts, "exports/model.tflite") == ["exports/model.tflite"]


def test_unchanged_files_pass_and_are_each_named(artifacts: Path) -> None:
    checked = manifest.verify(
        artifacts, recorded(artifacts), ["exports/saved_model", "exports/class_names.json"]
    )
    assert checked == [
        "exports/saved_model/saved_model.pb",
        "exports/saved_model/variables/variables.index",
        "exports/class_names.json",
    ]


@pytest.mark.parametrize(
    ("change", "path", "said"),
    [
        ("overwrite", "exports/saved_model/variables/variables.index", "does not match its recorded SHA-256"),
        ("delete", "exports/saved_model/saved_model.pb", "is missing (promote recorded it)"),
        ("add", "exports/saved_model/assets/extra.txt", "(it was added)"),
    ],
)
def test_a_file_changed_after_promotion_is_refused_by_name(
    artifacts: Path, change: str, path: str, said: str
) -> None:
    record = recorded(artifacts)
    target = artifacts / path
    if change == "delete":
        target.unlink()
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"swapped")
    with pytest.raises(FilesChanged) as info:
        manifest.verify(artifacts, record, ["exports/saved_model"])
    assert (info.value.path, said in info.value.what) == (path, True), str(info.value)


def test_a_file_promote_never_recorded_is_refused(artifacts: Path) -> None:
    record = {p: d for p, d in recorded(artifacts).items() if p != "exports/model.tflite"}
    with pytest.raises(FilesChanged, match="not among the files promote recorded"):
        manifest.verify(artifacts, record, ["exports/model.tflite"])


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"format":1,"files":{"exports/model.tflite":"00"}}', "does not match the tag"),
        (b"not json", "is not a manifest promote wrote"),
        (b'{"format":1,"files":["exports/model.tflite"]}', "is not a manifest promote wrote"),
        (b'{"format":1,"files":{"exports/model.tflite":7}}', "is not a manifest promote wrote"),
    ],
)
def test_a_manifest_other_than_the_tagged_one_or_no_manifest_is_refused(body: bytes, said: str) -> None:
    # The first: a well-formed manifest that is not the one the tag names (someone rewrote it in the bucket).
    tag = (
        manifest.digest(b"what promote wrote") if said == "does not match the tag" else manifest.digest(body)
    )
    with pytest.raises(FilesChanged, match=said) as info:
        manifest.read_manifest(body, tag)
    assert info.value.path == manifest.MANIFEST_PATH
