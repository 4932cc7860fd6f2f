"""What `gpu-runner mlflow-server up` reads from the project: the MLflow release uv.lock pins, the experiments and
the served model configs/train.yaml names (the server makes them and sets who may do what there), and the
hash-pinned requirements its first boot installs (the platform's server-requirements.txt, or the project's own
infra/mlflow-server-requirements.txt once its uv.lock moved mlflow or boto3 away from the platform's)."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_runner.mlflow_server.mlflow_wake import MlflowServerError

DEFAULT_TRAIN_CONFIG = Path("configs/train.yaml")
# A project's own requirements file, which `make mlflow-server-requirements` writes (server_requirements.py).
DEFAULT_REQUIREMENTS = Path("infra/mlflow-server-requirements.txt")
# The one this release ships, compiled against the platform's uv.lock: the template repository's scripts/relock.py
# keeps that lock's versions equal to a new project's, so a project that has not moved mlflow or boto3 needs no file.
PLATFORM_REQUIREMENTS = Path(__file__).with_name("server-requirements.txt")
REGENERATE = "make mlflow-server-requirements"
WRITES = f" (it writes {DEFAULT_REQUIREMENTS}, which up takes when --requirements is not given)"
# predict.yml logs each batch prediction into `<tracking.experiment_name>-inference` (gpu_job.batch_tracking's
# INFERENCE_SUFFIX; the two packages never import each other: tests/job/test_batch_tracking.py holds them equal).
INFERENCE_SUFFIX = "-inference"
# The experiment promote logs the files it evaluated to, whose runs are the served versions' sources.
PROMOTIONS_SUFFIX = " promotions"
# One requirement of a pip-compiled file, continuation lines joined: `name[extras]==version --hash=sha256:...`.
REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>\S+)(?P<hashes>.*)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def locked_version(lock: Path, name: str) -> str:
    """The version of `name` that uv.lock pins."""
    try:
        packages = tomllib.loads(lock.read_text(encoding="utf-8")).get("package", [])
    except FileNotFoundError:
        raise MlflowServerError(f"--lock: {lock} not found (run from the project root)") from None
    for package in packages:
        if package.get("name") == name:
            return str(package["version"])
    raise MlflowServerError(f"--lock: {lock} locks no {name} package: is it this project's uv.lock?")


@dataclass(frozen=True)
class Served:
    """What the server makes on every boot: the experiments the jobs log to (ci: EDIT), the served model and
    its promotions experiment (promote: EDIT, ci: READ)."""

    experiments: tuple[str, ...]
    model: str

    @property
    def promotions(self) -> str:
        return self.model + PROMOTIONS_SUFFIX

    def experiments_json(self) -> str:
        """The stack parameter ExperimentNames: JSON, so any name (quotes, commas, unicode) passes unchanged."""
        return json.dumps(list(self.experiments), ensure_ascii=False)


def _field(config: dict[str, Any], section: str, key: str, where: Path) -> str:
    value = (config.get(section) or {}).get(key) if isinstance(config, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise MlflowServerError(
            f"--train-config: {where} has no {section}.{key} (got {value!r}): set it to the name the server "
            "should make, on the default branch"
        )
    return value


def served_layout(train_config: Path) -> Served:
    """From the default branch's configs/train.yaml: train.yml logs into tracking.experiment_name, and so does
    sweep.yml (sweep plan/trial/collect use the training config's experiment: the project's sweep_project.py
    passes base.tracking.experiment_name to gpu_job.sweep, and configs/sweep.yaml names none); predict.yml into its -inference twin.
    registry.model_name is the model predict.yml serves."""
    try:
        config = yaml.safe_load(train_config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MlflowServerError(
            f"--train-config: {train_config} not found (run from the project root)"
        ) from None
    experiment = _field(config, "tracking", "experiment_name", train_config)
    model = _field(config, "registry", "model_name", train_config)
    return Served((experiment, experiment + INFERENCE_SUFFIX), model)


@dataclass(frozen=True)
class Requirements:
    body: bytes
    sha256: str

    @property
    def key(self) -> str:
        """Where `up` uploads it (content-addressed: a new file never overwrites the one a server booted from)."""
        return f"mlflow-server/requirements-{self.sha256}.txt"


def requirement_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) of every requirement: continuations joined, comments dropped."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            lines.append((start, pending.strip()))
        pending = ""
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines


def requirements_file(given: Path | None, project: Path = Path()) -> Path:
    """--requirements when given; else the project's own file when it has one; else the platform's."""
    if given is not None:
        return given
    own = project / DEFAULT_REQUIREMENTS
    return own if own.is_file() else PLATFORM_REQUIREMENTS


def checked_requirements(path: Path, mlflow_version: str, boto3_version: str) -> Requirements:
    """The requirements file, refused unless every requirement is pinned with at least one sha256 (pip's
    --require-hashes would refuse it on the instance, after the instance was paid for) and it pins the mlflow and
    boto3 that uv.lock does."""
    try:
        body = path.read_bytes()
    except FileNotFoundError:
        raise MlflowServerError(f"--requirements: {path} not found: run `{REGENERATE}`{WRITES}") from None
    pins: dict[str, str] = {}
    problems = []
    for number, line in requirement_lines(body.decode("utf-8")):
        match = REQUIREMENT.fullmatch(line)
        if match is None or not HASH.search(match["hashes"]):
            problems.append(f"line {number}: '{line[:80]}' is not name==version with --hash=sha256:...")
            continue
        pins[match["name"].lower().replace("_", "-")] = match["version"]
    for name, locked in (("mlflow", mlflow_version), ("boto3", boto3_version)):
        if pins.get(name) != locked:
            problems.append(f"{name} is {pins.get(name, 'missing')} there, {locked} in uv.lock")
    if problems:
        raise MlflowServerError(
            f"--requirements: {path} is not the hash-pinned closure of this uv.lock ({'; '.join(problems)}): "
            f"run `{REGENERATE}`{WRITES}"
        )
    return Requirements(body, hashlib.sha256(body).hexdigest())
