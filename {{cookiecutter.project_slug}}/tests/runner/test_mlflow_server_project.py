"""What `gpu-runner mlflow-server up` reads from this project, checked without deploying: the requirements it takes
pass the check `up` makes against this uv.lock, and the server makes the experiments this project's jobs log to.

Deploying the server, its first boot, who may do what on it and the tunnel are the platform's tests (template
repository, `platform/tests/runner/test_mlflow_server*.py`, `test_mlflow_tunnel.py`), with a training config and
lock of their own."""

from __future__ import annotations

from typing import Any

import mlflow
import yaml
from project_package import PROJECT_DIR

from gpu_runner.mlflow_server import mlflow_server_project as project

LOCK = PROJECT_DIR / "uv.lock"
TRAIN_CONFIG = PROJECT_DIR / "configs" / "train.yaml"


def test_up_accepts_the_requirements_it_takes_for_this_project() -> None:
    """The platform's file while this uv.lock keeps its mlflow and boto3, else infra/mlflow-server-requirements.txt
    (`make mlflow-server-requirements`): either way hash-pinned, at this lock's versions, which this project's
    clients run."""
    taken = project.requirements_file(None, PROJECT_DIR)
    mlflow_version = project.locked_version(LOCK, "mlflow")
    project.checked_requirements(taken, mlflow_version, project.locked_version(LOCK, "boto3"))
    assert mlflow_version == mlflow.__version__


def test_the_server_makes_the_experiments_this_projects_jobs_log_to() -> None:
    """train.yml and sweep.yml log to tracking.experiment_name, predict.yml to its `-inference` twin (the
    platform's gpu_job.batch_tracking names it, tested there); promote.yml serves registry.model_name."""
    config = yaml.safe_load(TRAIN_CONFIG.read_text(encoding="utf-8"))
    served = project.served_layout(TRAIN_CONFIG)
    experiment = config["tracking"]["experiment_name"]
    assert served.experiments == (experiment, experiment + project.INFERENCE_SUFFIX)
    assert served.model == config["registry"]["model_name"]
    # A sweep logs into the training config's experiment, not one of its own: configs/sweep.yaml names none.
    # (Its keys, not its text: a package name may hold the word, as retina_scan_classifier_experiments does.)
    sweep = yaml.safe_load((PROJECT_DIR / "configs" / "sweep.yaml").read_text(encoding="utf-8"))
    assert not [key for key in _keys(sweep) if "experiment" in key or key == "tracking"], sweep


def _keys(tree: Any) -> list[str]:
    """Every mapping key of a parsed YAML document, at any depth."""
    if isinstance(tree, dict):
        return [str(key) for key in tree] + [k for value in tree.values() for k in _keys(value)]
    if isinstance(tree, list):
        return [k for item in tree for k in _keys(item)]
    return []
