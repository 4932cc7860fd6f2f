"""Checkpoints mirrored to (moto) S3, and a training killed mid-run that resumes in the same MLflow run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
import yaml
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }}.checkpoints import S3Checkpoints, checkpoint_prefix, config_hash
from {{ cookiecutter.package_name }}.config import ConfigError, config_from_dict
from {{ cookiecutter.package_name }}.errors import DataError

BUCKET = "checkpoints-test"
ENV = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SHA": "fedcba9876543210fedcba9876543210fedcba98",
    "GITHUB_REF_NAME": "train/resume",
    "GITHUB_REPOSITORY": "org/repo",
    "GITHUB_RUN_ID": "99",
}


@pytest.fixture(scope="module")
def bucket(moto_endpoint: str) -> str:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return BUCKET


def test_prefix_is_per_branch_commit_and_config() -> None:
    digest = config_hash({"training": {"epochs": 3}})
    assert digest != config_hash({"training": {"epochs": 4}})
    uri = checkpoint_prefix("s3://b/ckpt/", "train/$(touch x)", "a" * 40, digest)
    assert uri == f"s3://b/ckpt/train-touch-x/{'a' * 12}-{digest}"


def test_same_training_on_another_machine_finds_the_same_checkpoint() -> None:
    here = config_from_dict({"training": {"checkpoint_dir": "/a", "watch_interruptions": True}})
    there = config_from_dict({"training": {"checkpoint_dir": "/b", "checkpoint_uri": "s3://b/x"}})
    assert config_hash(here.trajectory()) == config_hash(there.trajectory())
    longer = config_from_dict({"training": {"epochs": 21}})
    assert config_hash(longer.trajectory()) != config_hash(here.trajectory())


def test_checkpoint_uri_must_be_s3_with_a_bucket() -> None:
    for bad in ("/local/dir", "s3://", "gs://bucket/x"):
        with pytest.raises(ConfigError, match=r"training\.checkpoint_uri"):
            config_from_dict({"training": {"checkpoint_uri": bad}})


def test_missing_bucket_names_the_field_and_the_fix(moto_endpoint: str, tmp_path: Path) -> None:
    store = S3Checkpoints("s3://no-such-bucket-here/x", tmp_path)
    with pytest.raises(DataError, match=r"training\.checkpoint_uri .*does not exist.*infra/"):
        store.restore()


def test_push_mirrors_and_restore_ignores_a_finished_prefix(bucket: str, tmp_path: Path) -> None:
    local = tmp_path / "backup"
    (local / "chief").mkdir(parents=True)
    (local / "chief" / "old.index").write_text("old")
    store = S3Checkpoints(f"s3://{bucket}/mirror", local)
    assert store.push({"run_id": "r1", "epochs_done": 1}) == 1
    (local / "chief" / "old.index").unlink()
    (local / "chief" / "new.index").write_text("new")
    store.push({"run_id": "r1", "epochs_done": 2})
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="mirror/")["Contents"]]
    assert sorted(keys) == ["mirror/files/chief/new.index", "mirror/state.json"]

    fresh = S3Checkpoints(f"s3://{bucket}/mirror", tmp_path / "elsewhere")
    restored = fresh.restore()
    assert restored is not None and (restored.run_id, restored.epochs_done, restored.files) == ("r1", 2, 1)
    assert (tmp_path / "elsewhere" / "chief" / "new.index").read_text() == "new"
    store.mark_complete({"run_id": "r1", "epochs_done": 2})
    assert fresh.restore() is None


def _state(uri: str) -> dict:
    return S3Checkpoints(uri, Path()).state() or {}


@pytest.mark.slow
def test_killed_training_resumes_in_the_same_run(bucket: str, mlflow_server: str, tmp_path: Path) -> None:
    epochs = 12
    raw = {
        "training": {
            "epochs": epochs,
            "early_stopping_patience": 50,
            "checkpoint_dir": str(tmp_path / "ckpt"),
        },
        "export": {"output_dir": str(tmp_path / "out"), "tflite": False},
        "tracking": {"experiment_name": "resume", "log_system_metrics": False, "log_model": False},
    }
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(raw))
    uri = f"s3://{bucket}/ckpt"
    cfg = config_from_dict({**raw, "training": {**raw["training"], "checkpoint_uri": uri}})
    prefix = checkpoint_prefix(uri, ENV["GITHUB_REF_NAME"], ENV["GITHUB_SHA"], config_hash(cfg.trajectory()))
    env = {**os.environ, **ENV, "MLFLOW_TRACKING_URI": mlflow_server, "GITHUB_RUN_ATTEMPT": "1"}
    cmd = [sys.executable, "-m", "{{ cookiecutter.package_name }}", "train", "--config", str(config)]
    cmd += ["--checkpoint-uri", uri]

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
