"""`gpu-runner batch open-run` against a real MLflow server: the run a Batch job trains into opens in the experiment
its config names, the real MLflow client then resumes exactly that run from MLFLOW_RUN_ID (what the job does), and
bad input (no tracking server, no experiment name) is refused before any run exists."""

from __future__ import annotations

import uuid
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow.tracking import MlflowClient

from gpu_runner import cli
from gpu_runner.batch.batch_run import config_in, experiment_name
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.mlflow_rest import MlflowRest


@pytest.fixture
def open_run_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`gpu-runner --settings <batch settings> batch open-run` as a workflow step runs it."""
    settings = tmp_path / "gpu-runner.yaml"
    settings.write_text(
        yaml.safe_dump(
            {"project": "demo", "region": "us-east-1", "instance_types": ["g5.xlarge"], "backend": "batch"}
        )
    )
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/demo")
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "github-output"))
    return ["--settings", str(settings), "batch", "open-run"]


def _config(tmp_path: Path, tracking: dict) -> Path:
    path = tmp_path / "configs" / "train.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"training": {"epochs": 1}, "tracking": tracking}))
    return path


def test_the_run_opens_in_the_configs_experiment_and_mlflow_resumes_it(
    open_run_cli: list[str], mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    experiment = f"batch-open-{uuid.uuid4().hex[:8]}"
    config = _config(tmp_path, {"experiment_name": experiment})

    assert (
        cli.main([*open_run_cli, "--config=configs/train.yaml", f"--source-dir={config.parent.parent}"]) == 0
    )
    key, _, run_id = (tmp_path / "github-output").read_text().strip().partition("=")
    assert key == "mlflow-run-id"
    client = MlflowClient(mlflow_server)
    run = client.get_run(run_id)
    # Created with the experiment, and tagged with the backend.
    assert run.info.experiment_id == client.get_experiment_by_name(experiment).experiment_id
    assert run.data.tags["gpu.backend"] == "batch"

    # What the job's training does: set the config's experiment, start a run with MLFLOW_RUN_ID set.
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name="from-the-job") as resumed:
        mlflow.log_metric("val_accuracy", 0.5)
    assert resumed.info.run_id == run_id
    assert client.get_run(run_id).data.metrics["val_accuracy"] == 0.5

    # A second job of the same experiment gets its own run in the same experiment.
    assert (
        cli.main([*open_run_cli, "--config=configs/train.yaml", f"--source-dir={config.parent.parent}"]) == 0
    )
    second = (tmp_path / "github-output").read_text().strip().splitlines()[-1].partition("=")[2]
    assert second != run_id
    assert client.get_run(second).info.experiment_id == run.info.experiment_id


def test_an_experiment_created_meanwhile_is_used_not_refused(
    mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs of a new experiment at once: the second's experiments/create is refused (it exists by then), and
    its run opens in the experiment the first created."""
    name = f"batch-race-{uuid.uuid4().hex[:8]}"
    client = MlflowRest(mlflow_server)
    existing = MlflowClient(mlflow_server).create_experiment(name)
    looked_up: list[str] = []
    real = MlflowRest.experiment_id

    def late_lookup(self: MlflowRest, wanted: str) -> str | None:
        looked_up.append(wanted)
        return None if len(looked_up) == 1 else real(self, wanted)  # the first look-up came before the create

    monkeypatch.setattr(MlflowRest, "experiment_id", late_lookup)
    run_id = client.open_run(name, {})
    assert looked_up == [name, name]
    assert MlflowClient(mlflow_server).get_run(run_id).info.experiment_id == existing


@pytest.mark.parametrize("uri", ["", "file:///tmp/mlruns", "sqlite:///mlflow.db"])
def test_without_a_tracking_server_nothing_is_opened(
    open_run_cli: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    config = _config(tmp_path, {"experiment_name": "anything"})
    assert (
        cli.main([*open_run_cli, "--config=configs/train.yaml", f"--source-dir={config.parent.parent}"]) == 1
    )
    err = capsys.readouterr().err
    assert "backend: batch needs an MLflow tracking server" in err and "MLFLOW_TRACKING_URI" in err
    assert not (tmp_path / "github-output").exists()


@pytest.mark.parametrize(
    "tracking", [{}, {"experiment_name": ""}, {"experiment_name": 7}, {"experiment_name": "x" * 257}]
)
def test_a_config_without_an_experiment_name_is_refused(tmp_path: Path, tracking: dict) -> None:
    with pytest.raises(RunnerError, match=r"tracking\.experiment_name must be a non-empty string"):
        experiment_name(_config(tmp_path, tracking))


def test_an_unreadable_config_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match=r"--config: cannot read"):
        experiment_name(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "config",
    ["../../etc/passwd.yaml", "configs/../../x.yaml", "/etc/x.yaml", "--source-dir=/", "configs/x.txt", ""],
)
def test_a_config_input_outside_configs_is_refused(tmp_path: Path, config: str) -> None:
    """The dispatch input `config` (anyone who may dispatch sets it) names a file of the checkout, nothing else."""
    with pytest.raises(RunnerError, match=r"--config: .* is not a configs/<name>.yaml path of the commit"):
        config_in(tmp_path, config)
    assert config_in(tmp_path, "configs/sub/train-2.yml") == tmp_path / "configs" / "sub" / "train-2.yml"
