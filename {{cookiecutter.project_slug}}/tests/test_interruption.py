"""The spot interruption watcher against a local IMDSv2 double, and a training stopped by a notice that resumes."""

import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest
from doubles.imds_double import ImdsDouble
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }}.checkpoints import S3Checkpoints, checkpoint_prefix, config_hash
from {{ cookiecutter.package_name }}.cli import main
from {{ cookiecutter.package_name }}.config import config_from_dict
from {{ cookiecutter.package_name }}.errors import EXIT_INTERRUPTED, TrainingInterrupted
from {{ cookiecutter.package_name }}.interruption import ImdsClient, InterruptionWatcher, should_watch
from {{ cookiecutter.package_name }}.train import train

BUCKET = "interruption-test"


@pytest.fixture
def imds():
    with ImdsDouble() as double:
        yield double


def test_watch_only_on_spot_unless_told() -> None:
    assert should_watch("auto", {"GPU_MARKET": "spot"})
    assert not should_watch("auto", {"GPU_MARKET": "on-demand"})
    assert not should_watch("auto", {})
    assert should_watch(True, {}) and not should_watch(False, {"GPU_MARKET": "spot"})


def test_imds_needs_the_session_token(imds: ImdsDouble) -> None:
    imds.interrupt()
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(imds.url + "/latest/meta-data/spot/instance-action", timeout=2)
    assert denied.value.code == 401
    assert ImdsClient(imds.url).get_json("/latest/meta-data/spot/instance-action") == {
        "action": "terminate",
        "time": "2026-11-30T12:00:00Z",
    }
    assert ImdsClient(imds.url).get_json("/latest/meta-data/events/recommendations/rebalance") is None


def test_watcher_sees_rebalance_then_the_notice_and_stops_polling(imds: ImdsDouble) -> None:
    lines: list[str] = []
    with InterruptionWatcher(ImdsClient(imds.url), interval=0.05, log=lines.append) as watcher:
        time.sleep(0.3)
        assert watcher.rebalance is None and watcher.instance_action is None
        imds.recommend_rebalance()
        deadline = time.monotonic() + 10
        while watcher.rebalance is None and time.monotonic() < deadline:
            time.sleep(0.05)
        imds.interrupt()
        while watcher.instance_action is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.rebalance is not None and watcher.instance_action is not None
        polls = len(imds.requests)
        time.sleep(0.3)
        assert len(imds.requests) == polls, "the watcher kept polling after the notice"
    assert watcher.instance_action.detail == {"action": "terminate", "time": "2026-11-30T12:00:00Z"}
    # One token for the whole watch (it lives six hours), not one per poll.
    assert sum(1 for method, _, _ in imds.requests if method == "PUT") == 1
    assert any("rebalance" in line for line in lines) and any("interruption notice" in line for line in lines)


def test_watcher_survives_imds_errors(imds: ImdsDouble) -> None:
    imds.down = True
    lines: list[str] = []
    with InterruptionWatcher(ImdsClient(imds.url), interval=0.05, log=lines.append) as watcher:
        time.sleep(0.3)
        assert watcher.errors >= 2
        imds.down = False
        imds.interrupt()
        deadline = time.monotonic() + 10
        while watcher.instance_action is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert watcher.instance_action is not None
    assert sum("WARNING" in line for line in lines) == 1  # said once, not every poll


def _state(uri: str) -> dict:
    return S3Checkpoints(uri, Path()).state() or {}


@pytest.mark.slow
def test_notice_checkpoints_stops_and_the_next_attempt_resumes(
    moto_endpoint: str, mlflow_server: str, imds: ImdsDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    epochs = 4

    def config(name: str, uri: str = "", watch: bool = False) -> dict:
        return {
            "training": {
                "epochs": epochs, "early_stopping_patience": 50, "checkpoint_dir": str(tmp_path / name / "ckpt"),
                "checkpoint_uri": uri, "checkpoint_every": 5, "watch_interruptions": watch,
                "interruption_poll_seconds": 0.2,
            },
            "export": {"output_dir": str(tmp_path / name / "out"), "tflite": False},
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

    uri = f"s3://{BUCKET}/ckpt"
    interrupted_cfg = config_from_dict(config("attempts", uri, watch=True))
    prefix = checkpoint_prefix(uri, "train/spot", "ab" * 20, config_hash(interrupted_cfg.trajectory()))
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


def test_cli_exits_75_when_interrupted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    def interrupted(*_: object) -> None:
        raise TrainingInterrupted({"action": "terminate", "time": "2026-11-30T12:00:00Z"}, 3)

    monkeypatch.setattr("{{ cookiecutter.package_name }}.train.train", interrupted)
    config = tmp_path / "train.yaml"
    config.write_text("training:\n  epochs: 1\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    assert main(["train", "--config", str(config)]) == EXIT_INTERRUPTED
    assert "3 epoch(s) done" in capsys.readouterr().err
    assert "### Training interrupted" in (tmp_path / "summary.md").read_text()
