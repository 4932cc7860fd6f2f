"""Which model a batch uses: a registry alias or version of `registry.model_name`, or an export on disk.

`--model` reads, in this order: `models:/<name>@<alias>` or `models:/<name>/<version>` (MLflow's model URIs),
a bare version (`3`) or alias (`champion`) of the configured model, else a path. A registry model is resolved to
one version first (the workflow's CPU job does it, so an alias moved mid-batch cannot mix two models), then its
training run's export is downloaded from the run's `exports/` with the class_names.json that labels it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import mlflow.artifacts
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from .predict_io import PredictError

# The run's artifact under exports/ for each export train writes (train.py, _export).
EXPORT_FILES = {
    "saved_model": "saved_model",
    "tflite": "model.tflite",
    "tflite_int8": "model_int8.tflite",
}
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
            f"--model '{spec}': no registered model '{name}'; train one (registry.model_name in the config) "
            "or pass a local export"
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
    return RegistryModel(name, str(found.version), found.run_id, alias)


def available_exports(client: MlflowClient, model: RegistryModel) -> list[str]:
    """The exports the version's training run kept (train drops a TFLite copy below the agreement rule)."""
    logged = {Path(info.path).name for info in client.list_artifacts(model.run_id, "exports")}
    return [name for name, file in EXPORT_FILES.items() if file in logged]


def pick_export(client: MlflowClient, model: RegistryModel, wanted: str, device: str) -> str:
    available = available_exports(client, model)
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
    """The export and its class_names.json into `dest`, side by side as train wrote them; the export's path."""
    from . import export  # CLASS_NAMES_FILE; export imports TensorFlow, which the caller has paid for by now

    dest.mkdir(parents=True, exist_ok=True)

    def fetch(name: str) -> Path:
        # The local path of what it downloaded, a file or a folder (mlflow.artifacts.download_artifacts).
        return Path(
            mlflow.artifacts.download_artifacts(
                run_id=model.run_id, artifact_path=f"exports/{name}", dst_path=str(dest)
            )
        )

    fetch(export.CLASS_NAMES_FILE)
    return fetch(EXPORT_FILES[export_name])
