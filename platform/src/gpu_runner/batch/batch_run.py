"""`gpu-runner batch open-run`: the MLflow run a Batch training job trains into, opened by the submitting job.

The submitting job holds the MLflow credentials and the job does not need the run's id to find it: the job gets
MLFLOW_RUN_ID, which MLflow's `start_run` resumes (mlflow.tracking.fluent, "MLFLOW_RUN_ID" environment variable),
and `batch wait` logs each attempt's cost to that same run. MLflow resumes a run only inside the experiment the
job sets (`set_experiment` then `start_run` of a run elsewhere is refused), so the run opens in the experiment the
shipped commit's config names (`tracking.experiment_name`, read as data: never imported or run here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from gpu_runner.core.errors import RunnerError
from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest

# MLflow's limit for an experiment name is its store's column (mlflow/store/tracking/dbmodels/models.py,
# SqlExperiment.name: String(256), MLflow 3.x).
MAX_EXPERIMENT_NAME = 256
# A training config of the commit by a plain relative path (the job opens the same path inside the shipped tree).
CONFIG_PATH = re.compile(r"configs/[A-Za-z0-9_./-]+\.ya?ml")


def config_in(source_dir: Path, config: str) -> Path:
    """The path of `config` (a dispatch input) inside the checkout, refused unless it is configs/<name>.yaml."""
    if not CONFIG_PATH.fullmatch(config) or ".." in config.split("/"):
        raise RunnerError(
            f"--config: {config!r} is not a configs/<name>.yaml path of the commit: dispatch train.yml with the "
            "config input naming a file under configs/"
        )
    return source_dir / config


def experiment_name(config: Path) -> str:
    """The experiment a training config names (`tracking.experiment_name`), with the field and fix on error."""
    try:
        loaded = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise RunnerError(f"--config: cannot read {config}: {error}") from None
    tracking = loaded.get("tracking") if isinstance(loaded, dict) else None
    name = tracking.get("experiment_name") if isinstance(tracking, dict) else None
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_EXPERIMENT_NAME:
        raise RunnerError(
            f"{config}: tracking.experiment_name must be a non-empty string of at most {MAX_EXPERIMENT_NAME} "
            f"characters (got {name!r}): the Batch job's MLflow run opens in that experiment"
        )
    return name


def open_run(config: Path, env: Mapping[str, str], tags: Mapping[str, str]) -> str:
    """Open the run for the job trained with `config`; its id. A Batch job's container is gone when it ends, so a
    local MLflow store inside it would be lost: without an http(s) tracking server nothing is submitted."""
    client = MlflowRest.from_env(env)
    if client is None:
        raise RunnerError(
            "backend: batch needs an MLflow tracking server: the job's container (and any local MLflow store in "
            "it) is gone when the job ends. Set the repository variable MLFLOW_TRACKING_URI to an http(s) server "
            "(manual/mlflow-server.md), or use backend: runner"
        )
    name = experiment_name(config)
    try:
        return client.open_run(name, tags)
    except MlflowError as error:
        raise RunnerError(f"MLflow: the job's run could not be opened in {name!r}: {error}") from None
