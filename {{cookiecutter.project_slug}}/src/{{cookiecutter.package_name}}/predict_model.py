"""Which model a batch uses: a registry alias or version of `registry.model_name`, or an export on disk.

`--model` reads, in this order: `models:/<name>@<alias>` or `models:/<name>/<version>` (MLflow's model URIs),
a bare version (`3`) or alias (`champion`) of the configured model, else a path. A registry model is resolved to
one version first (the workflow's CPU job does it, so an alias moved mid-batch cannot mix two models), then its
run's export is downloaded from the run's `exports/` with the class_names.json that labels it.

Nothing downloaded is loaded before it is checked (issue 30, High 2): a version must carry the SHA-256 of the
manifest promote wrote (gpu_job.manifest), the manifest must match it, and every file downloaded must match the
manifest. A version without the tag (registered before promote recorded digests) and a file that changed, went
missing or was added are refused, naming the file and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import mlflow.artifacts
from gpu_job import manifest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from . import model_files
from .errors import FilesChanged, PredictError

# The run's artifact under exports/ for each export train writes (train.py, _export_and_log).
EXPORT_FILES = model_files.EXPORT_FILES
# What `--export auto` takes, best first: the GPU runs the SavedModel (the model of record); a CPU the TFLite
# dynamic-range copy, the fastest on x86 (make bench), then the int8 copy, which train drops when it disagrees.
AUTO_EXPORTS = {"gpu": ("saved_model",), "cpu": ("tflite", "tflite_int8", "saved_model")}
_URI = re.compile(r"models:/(?P<name>[^/@]+)(?:@(?P<alias>[\w-]+)|/(?P<version>[0-9]+))")
_ALIAS = re.compile(r"[A-Za-z_][\w-]*")  # MLflow aliases: letters, digits, _ and -, not a bare number


@dataclass(frozen=True)
class RegistryModel:
    """One version of a registered model, with the run that trained it (and the alias that named it, if any)."""

    name: str
    version: str
    run_id: str
    alias: str | None = None
    # The SHA-256 of the manifest of its files (manifest.MANIFEST_TAG), which promote tagged it with.
    manifest_sha256: str = ""

    @property
    def uri(self) -> str:
        """The pinned reference the GPU or CPU job is handed: a version, never an alias."""
        return f"models:/{self.name}/{self.version}"

    @property
    def label(self) -> str:
        return f"{self.name}/{self.version}"


def registry_spec(spec: str) -> tuple[str | None, str | None, str | None] | None:
    """(name, alias, version) when `spec` names a registry model (name None: the config's registry.model_name),
    None when it is a path."""
    if spec.startswith("models:/"):
        match = _URI.fullmatch(spec)
        if not match:
            raise PredictError(f"--model '{spec}': use models:/<name>@<alias> or models:/<name>/<version>")
        return match["name"], match["alias"], match["version"]
    if spec.isdigit():
        return None, None, spec
    if _ALIAS.fullmatch(spec) and not Path(spec).exists():
        return None, spec, None
    return None


def resolve(client: MlflowClient, name: str, alias: str | None, version: str | None) -> RegistryModel:
    """The version `alias` points at (or `version` itself), or a message that says what the registry holds."""
    spec = f"models:/{name}@{alias}" if alias else f"models:/{name}/{version}"
    try:
        registered = client.get_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise PredictError(f"--model '{spec}': the registry did not answer ({error.message})") from None
        raise PredictError(
            f"--model '{spec}': no registered model '{name}'; promote a training run (promote.yml; "
            "registry.model_name in the config) or pass a local export"
        ) from None
    try:
        found = (
            client.get_model_version_by_alias(name, alias)
            if alias
            else client.get_model_version(name, str(version))
        )
    except MlflowException as error:
        if error.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise PredictError(f"--model '{spec}': the registry did not answer ({error.message})") from None
        aliases = ", ".join(f"{a}={v}" for a, v in sorted(registered.aliases.items())) or "none"
        latest = max((int(v.version) for v in client.search_model_versions(f"name='{name}'")), default=None)
        raise PredictError(
            f"--model '{spec}': {'alias ' + repr(alias) if alias else 'version ' + str(version)} does not exist "
            f"(aliases: {aliases}; latest version: {latest or 'none'}); promote a version or pass one that exists"
        ) from None
    if not found.run_id:
        raise PredictError(
            f"--model '{spec}': version {found.version} has no training run to take exports from"
        )
    tag = (found.tags or {}).get(manifest.MANIFEST_TAG, "")
    if not re.fullmatch(r"[0-9a-f]{64}", tag):
        raise PredictError(
            f"--model '{spec}': version {found.version} has no tag {manifest.MANIFEST_TAG}: it was registered "
            "before promote recorded the SHA-256 of every file, so its files cannot be checked and predict refuses "
            f"it. Fix: promote again (promote.yml with run-id=<the training run>, e.g. this version's run "
            f"{found.run_id})"
        )
    return RegistryModel(name, str(found.version), found.run_id, alias, tag)


def _refused(model: RegistryModel, changed: FilesChanged) -> PredictError:
    return PredictError(
        f"--model '{model.uri}': {changed.path} {changed.what}: the files of version {model.version} (run "
        f"{model.run_id}) changed after promotion, so nothing was loaded or predicted. Fix: restore the file's "
        "earlier version in the bucket (versioning keeps it), or serve another version: an MLflow admin removes "
        "the alias from this one, then promote.yml with run-id=<a training run whose files are intact>"
    )


def recorded_files(model: RegistryModel, dest: Path) -> dict[str, str]:
    """The manifest promote wrote for the version (downloaded into `dest`), checked against its tag."""
    try:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=model.run_id, artifact_path=manifest.MANIFEST_PATH, dst_path=str(dest)
            )
        except (MlflowException, OSError):
            raise FilesChanged(manifest.MANIFEST_PATH, "is missing (promote wrote it)") from None
        return manifest.read_manifest(Path(path).read_bytes(), model.manifest_sha256)
    except FilesChanged as changed:
        raise _refused(model, changed) from None


def available_exports(recorded: Mapping[str, str]) -> list[str]:
    """The exports promote served with the version (a TFLite copy the run dropped, or promote did, is absent)."""
    return [
        name
        for name, file in EXPORT_FILES.items()
        if any(path == f"exports/{file}" or path.startswith(f"exports/{file}/") for path in recorded)
    ]


def pick_export(
    client: MlflowClient, model: RegistryModel, recorded: Mapping[str, str], wanted: str, device: str
) -> str:
    available = available_exports(recorded)
    choices = AUTO_EXPORTS[device] if wanted == "auto" else (wanted,)
    for choice in choices:
        if choice in available:
            return choice
    reason = ""
    if wanted != "auto":
        tag = client.get_run(model.run_id).data.tags.get(f"export.{wanted}")
        reason = f" (the run's tag export.{wanted}: {tag})" if tag else ""
    raise PredictError(
        f"--export {wanted}: version {model.version}'s run {model.run_id} kept {', '.join(available) or 'no export'}"
        f"{reason}; choose one of those"
    )


def download(model: RegistryModel, export_name: str, dest: Path) -> Path:
    """The export and its class_names.json into `dest`, side by side as train wrote them, each file checked
    against the manifest promote recorded before anything loads them; the export's path."""
    recorded = recorded_files(model, dest)
    wanted = [model_files.CLASS_NAMES_PATH, f"{model_files.EXPORTS_DIR}/{EXPORT_FILES[export_name]}"]
    try:
        for artifact in wanted:
            # MLflow puts an artifact at dst_path/<its last name>: into its own folder, to keep the run's layout.
            where = dest / Path(artifact).parent
            where.mkdir(parents=True, exist_ok=True)
            try:
                mlflow.artifacts.download_artifacts(
                    run_id=model.run_id, artifact_path=artifact, dst_path=str(where)
                )
            except (MlflowException, OSError):
                # Gone from the store (a folder's missing files are found by verify below).
                raise FilesChanged(artifact, "is missing (promote recorded it)") from None
        manifest.verify(dest, recorded, wanted)
    except FilesChanged as changed:
        raise _refused(model, changed) from None
    return dest / wanted[1]
