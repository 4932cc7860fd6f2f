"""The Keras callbacks in fit(): the S3 checkpoint sync survives a killed training (the next attempt resumes the
same MLflow run) and a spot notice checkpoints and stops it between batches."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest
import yaml
from gpu_job.checkpoints import (
    S3Checkpoints,
    caller_identity,
    config_hash,
    session_prefix,
)
from gpu_runner_testing.imds_double import ImdsDouble
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }}.config import config_from_dict
from {{ cookiecutter.package_name }}.errors import TrainingInterrupted
from {{ cookiecutter.package_name }}.train import train

BUCKET = "callbacks-test"
ENV = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SHA": "fedcba9876543210fedcba9876543210fedcba98",
    "GITHUB_REF_NAME": "train/resume",
    "GITHUB_REPOSITORY": "org/repo",
    "GITHUB_RUN_ID": "99",
}


@pytest.fixture
def imds():
    with ImdsDouble() as double:
        yield double


@pytest.fixture(scope="module")
def bucket(moto_endpoint: str) -> str:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return BUCKET


def _train_command(tmp_path: Path, raw: dict, uri: str, mlflow_server: str) -> tuple[list[str], dict, str]:
    """`python -m <package> train` on `raw` with checkpoints under `uri`, as attempt 1 of a workflow run: the
    command, its environment and the checkpoint prefix the training writes."""
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(raw))
    cfg = config_from_dict({**raw, "training": {**raw["training"], "checkpoint_uri": uri}})
    digest = config_hash(cfg.trajectory())
    # The training's own session's prefix (the test's credentials: the same session for every attempt here).
    prefix = session_prefix(uri, caller_identity(), ENV["GITHUB_REF_NAME"], ENV["GITHUB_SHA"], digest)
    env = {**os.environ, **ENV, "MLFLOW_TRACKING_URI": mlflow_server, "GITHUB_RUN_ATTEMPT": "1"}
    cmd = [sys.executable, "-m", "{{ cookiecutter.package_name }}", "train", "--config", str(config)]
    return [*cmd, "--checkpoint-uri", uri], env, prefix


@pytest.mark.slow
def test_killed_training_resumes_in_the_same_run(bucket: str, mlflow_server: str, tmp_path: Path) -> None:
    epochs = 12
    raw = {
        "training": {
            "epochs": epochs,
            "early_stopping_patience": 50,
            "checkpoint_dir": str(tmp_path / "ckpt"),
        },
        "export": {"output_dir": str(tmp_path / "out"), "tflite": False, "tflite_int8": False},
        "tracking": {"experiment_name": "resume", "log_system_metrics": False, "log_model": False},
    }
    cmd, env, prefix = _train_command(tmp_path, raw, f"s3://{bucket}/ckpt", mlflow_server)

    first = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    # Kill it (no clean-up of any kind: like a reclaimed machine) once two epochs are safe in S3.
    deadline = time.monotonic() + 300
    while _state(prefix).get("epochs_done", 0) < 2:
        assert first.poll() is None, first.stdout.read().decode() if first.stdout else ""
        assert time.monotonic() < deadline, "no checkpoint in S3 after 300 s"
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    saved = _state(prefix)["epochs_done"]
    assert saved < epochs, "the first attempt finished before it could be killed"
    client = MlflowClient(mlflow_server)
    run_id = _state(prefix)["run_id"]
    logged_before = len(client.get_metric_history(run_id, "loss"))
    # MLflow logs an epoch before its checkpoint is pushed: nothing saved is missing from the history.
    assert logged_before >= saved

    env["GITHUB_RUN_ATTEMPT"] = "2"
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{saved} epoch(s) done, run {run_id}" in second.stdout

    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["resumed.from_epoch"] == str(saved)
    assert run.data.metrics["epochs_run"] == epochs
    steps = sorted({m.step for m in client.get_metric_history(run_id, "val_loss")})
    assert steps == list(range(epochs))
    # At most the epoch in flight was lost (re-run after the resume).
    assert logged_before - saved <= 1
    assert _state(prefix)["complete"] is True
    runs = client.search_runs([run.info.experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]


@pytest.mark.slow
def test_killed_after_its_last_epoch_the_next_attempt_finishes_the_same_run(
    bucket: str, mlflow_server: str, tmp_path: Path
) -> None:
    # Spot reclaim or a cancel while the model is evaluated and exported: every epoch is trained and in S3, the
    # run is not ended. The next attempt must finish that run from the trained weights, not train in a new one.
    epochs = 3
    raw = {
        "training": {"epochs": epochs, "checkpoint_dir": str(tmp_path / "ckpt")},
        "export": {"output_dir": str(tmp_path / "out"), "tflite": True},
        "tracking": {"experiment_name": "resume-after-last-epoch", "log_system_metrics": False, "log_model": False},
    }  # fmt: skip
    cmd, env, prefix = _train_command(tmp_path, raw, f"s3://{bucket}/after-last-epoch", mlflow_server)

    first = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    assert first.stdout is not None
    said = []
    for line in first.stdout:
        said.append(line)
        if "Saved artifact at" in line:  # TensorFlow's line once the SavedModel is written: the export runs
            os.killpg(first.pid, signal.SIGKILL)
            break
    first.wait()
    assert first.returncode == -signal.SIGKILL, "".join(said)
    state = _state(prefix)
    assert state["epochs_done"] == epochs and not state.get("complete"), state

    env["GITHUB_RUN_ATTEMPT"] = "2"
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{epochs} epoch(s) done, run {state['run_id']}" in second.stdout, second.stdout
    assert "Epoch 1/" not in second.stdout, "the second attempt trained again"
    client = MlflowClient(mlflow_server)
    run = client.get_run(state["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["epochs_run"] == epochs
    assert "test_accuracy" in run.data.metrics and "tflite_agreement" in run.data.metrics
    steps = sorted({m.step for m in client.get_metric_history(run.info.run_id, "val_loss")})
    assert steps == list(range(epochs))
    assert _state(prefix)["complete"] is True
    assert [r.info.run_id for r in client.search_runs([run.info.experiment_id])] == [run.info.run_id]


@pytest.mark.slow
def test_notice_checkpoints_stops_and_the_next_attempt_resumes(
    bucket: str, mlflow_server: str, imds: ImdsDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    epochs = 4

    def config(name: str, uri: str = "", watch: bool = False) -> dict:
        return {
            "training": {
                "epochs": epochs, "early_stopping_patience": 50, "checkpoint_dir": str(tmp_path / name / "ckpt"),
                "checkpoint_uri": uri, "checkpoint_every": 5, "watch_interruptions": watch,
                "interruption_poll_seconds": 0.2,
            },
            "export": {"output_dir": str(tmp_path / name / "out"), "tflite": False, "tflite_int8": False},
            "tracking": {"experiment_name": "interruption", "log_system_metrics": False, "log_model": False},
        }  # fmt: skip

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
    for key, value in {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SHA": "ab" * 20,
        "GITHUB_REF_NAME": "train/spot",
    }.items():
        monkeypatch.setenv(key, value)
    baseline = train(config_from_dict(config("baseline")))

    uri = f"s3://{bucket}/interrupted"
    interrupted_cfg = config_from_dict(config("attempts", uri, watch=True))
    prefix = session_prefix(
        uri, caller_identity(), "train/spot", "ab" * 20, config_hash(interrupted_cfg.trajectory())
    )
    noticed: list[float] = []

    def notice_mid_second_epoch() -> None:
        # The two-minute warning arrives while the second epoch runs (the first epoch's backup is in S3).
        deadline = time.monotonic() + 300
        while _state(prefix).get("epochs_done", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        imds.interrupt()
        noticed.append(time.monotonic())

    notifier = threading.Thread(target=notice_mid_second_epoch, daemon=True)
    notifier.start()
    monkeypatch.setenv("TRAIN_ATTEMPT", "1")
    with pytest.raises(TrainingInterrupted) as stopped:
        train(interrupted_cfg)
    stopped_at = time.monotonic()
    notifier.join()
    seconds_to_stop = stopped_at - noticed[0]
    print(f"notice -> checkpoint in S3 and training stopped: {seconds_to_stop:.2f} s (EC2 gives 120 s)")
    assert seconds_to_stop < 120
    state = _state(prefix)
    assert state["epochs_done"] == stopped.value.epochs_done >= 1
    assert isinstance(state["batch"], int), state  # the forced mid-epoch backup, not only the epoch's
    client = MlflowClient(mlflow_server)
    run = client.get_run(state["run_id"])
    assert run.info.status == "KILLED"
    assert "terminate" in run.data.tags["interrupted.notice"]

    # The next attempt (a new machine: empty local dir, no notice) continues the same run to the end.
    imds.documents.clear()
    monkeypatch.setenv("TRAIN_ATTEMPT", "2")
    resumed = train(config_from_dict(config("attempt-2", uri)))
    assert resumed.run_id == state["run_id"]
    assert resumed.epochs_run == epochs
    run = client.get_run(resumed.run_id)
    assert run.info.status == "FINISHED"
    assert sorted({m.step for m in client.get_metric_history(resumed.run_id, "val_loss")}) == list(
        range(epochs)
    )
    # Training time per attempt, the interrupted one included: the stop job subtracts it from the billed time.
    seconds = client.get_metric_history(resumed.run_id, "training_seconds")
    assert sorted(m.step for m in seconds) == [1, 2]
    assert all(m.value > 0 for m in seconds)
    # Same seed, same data: the interrupted-and-resumed model is as good as the uninterrupted one.
    assert abs(resumed.metrics["test_accuracy"] - baseline.metrics["test_accuracy"]) <= 0.05


def _state(uri: str) -> dict:
    return S3Checkpoints(uri, Path()).state() or {}
