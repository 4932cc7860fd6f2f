"""The phase timeline of a real run: what the boot script, `wait` and the train job record, turned by the stop job
into durations on the training run (step = attempt) and the job summary. MLflow is a real tracking server, AWS
the moto server."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gpu_runner.core import timeline
from gpu_runner.core.aws import Aws
from gpu_runner.ec2_runner import lifecycle
from gpu_runner.ec2_runner.ownership import RunScope


def test_phases_from_the_workflow_are_checked(logged) -> None:
    pairs = ["boot=1796119890", "image-ready=1796119960", "job-started=$(touch pwned)", "nonsense=1"]
    phases = timeline.parse_phases([*pairs, "runner-online"])
    logs = logged()
    assert phases == {"boot": 1796119890.0, "image-ready": 1796119960.0}
    assert len(logs) == 3 and all(line.startswith("warning: timeline: ignored") for line in logs)


def test_durations_between_the_moments() -> None:
    launched = 1_796_119_860.0
    record = timeline.Timeline(
        launched=launched,
        terminated=launched + 420,
        phases={"boot": launched + 30, "image-ready": launched + 95, "runner-online": launched + 131,
                "job-started": launched + 140, "runner-started": launched + 120},
        training_start=launched + 152,
        training_end=launched + 400,
        training_seconds=230.0,
    )  # fmt: skip
    assert record.durations() == {
        "runner_online_seconds": 131.0,
        "image_ready_seconds": 95.0,
        "setup_seconds": 12.0,  # job started -> training run started (checkout, install, data)
        "teardown_seconds": 20.0,  # training run ended -> terminated
    }
    assert list(record.moments()) == [
        "launched", "boot", "image-ready", "runner-started", "runner-online", "job-started", "training start",
        "training end", "terminated",
    ]  # fmt: skip
    text = timeline.summary(record, attempt=1)
    assert text.startswith("**Timeline (attempt 1)**, after launch: launched 0 s · boot 30 s")
    spans = "runner_online_seconds 131 · image_ready_seconds 95 · setup_seconds 12 · teardown_seconds 20"
    assert spans in text
    assert "training_seconds 230" in text


def test_a_phase_nobody_recorded_is_left_out_not_zero() -> None:
    record = timeline.Timeline(launched=1000.0, terminated=1100.0, phases={"boot": 1000.0 + 10 * 86_400})
    assert record.durations() == {}  # no online, no image, no training: nothing invented
    assert "boot" not in record.moments()  # ten days away from this launch: not this attempt's


def test_a_resumed_attempt_ignores_the_first_attempts_run_start() -> None:
    """Attempt 2 trains in attempt 1's MLflow run: that run started before this launch."""
    run = {"info": {"start_time": 1_000_000, "end_time": 5_000_000}}
    record = timeline.from_mlflow(run, 30.0, launched=2000.0, terminated=5010.0, phases={})
    assert record.training_start is None and record.training_end == 5000.0
    assert record.durations() == {"teardown_seconds": 10.0}


def test_teardown_logs_the_timeline_to_the_training_run_once(
    settings, ctx, aws: Aws, github, faults, mlflow_server: str, tmp_path: Path, logged
) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    launched = outcome.launched
    described = aws.client("ec2", settings.region).describe_instances(InstanceIds=[launched.instance_id])
    launch_time = described["Reservations"][0]["Instances"][0]["LaunchTime"].timestamp()
    # The training run, as the train job leaves it: started after the launch, training_seconds at step 1.
    client = MlflowClient(mlflow_server)
    run = client.create_run(client.create_experiment(f"timeline-{uuid.uuid4().hex[:8]}"))
    run_id = run.info.run_id
    client.log_metric(run_id, "training_seconds", 0.5, step=1)
    time.sleep(1.1)  # whole seconds apart on MLflow's clock (milliseconds) and EC2's (seconds)
    client.set_terminated(run_id)
    now = datetime.now(UTC).timestamp()
    phases = {"boot": launch_time + 1, "image-ready": launch_time + 2, "runner-online": launch_time + 3,
              "job-started": int(now) - 1}  # fmt: skip
    summary = tmp_path / "summary.md"
    env = {"MLFLOW_TRACKING_URI": mlflow_server, "GITHUB_STEP_SUMMARY": str(summary)}
    request = lifecycle.CostRequest(100, run_id, 1, env, phases=phases)
    for _ in range(2):  # a re-run of the stop job logs nothing twice
        lifecycle.teardown(
            aws, github, RunScope(ctx, settings.project, settings.ssm_prefix), region=settings.region,
            instance_id=launched.instance_id, runner_id=outcome.runner_id, parameter=outcome.parameter,
            cost_request=request,
        )  # fmt: skip
    logs = logged()
    history = {
        key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
        for key in ("runner_online_seconds", "image_ready_seconds", "setup_seconds", "teardown_seconds")
    }
    assert history["runner_online_seconds"] == [(1, 3.0)]
    assert history["image_ready_seconds"] == [(1, 2.0)]
    ((step, setup),) = history["setup_seconds"]
    assert step == 1 and 0 <= setup <= 5
    ((step, teardown),) = history["teardown_seconds"]
    assert step == 1 and 0 <= teardown < 60
    assert any("already logged" in line for line in logs), logs
    text = summary.read_text()
    assert text.count("**Timeline (attempt 1)**") == 2  # each run of the stop job says what it saw
    assert "runner_online_seconds 3" in text and "training_seconds 0" in text


@pytest.mark.parametrize("uri", ["", "sqlite:///mlflow.db"])
def test_without_a_tracking_server_the_timeline_still_reaches_the_summary(
    settings, ctx, aws: Aws, github, tmp_path: Path, uri: str
) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    summary = tmp_path / "summary.md"
    env = {"MLFLOW_TRACKING_URI": uri, "GITHUB_STEP_SUMMARY": str(summary)}
    online = datetime.now(UTC) + timedelta(seconds=5)
    request = lifecycle.CostRequest(100, "some-run", 1, env, phases={"runner-online": online.timestamp()})
    lifecycle.teardown(
        aws, github, RunScope(ctx, settings.project, settings.ssm_prefix), region=settings.region,
        instance_id=outcome.launched.instance_id, runner_id=outcome.runner_id, parameter=outcome.parameter,
        cost_request=request,
    )  # fmt: skip
    text = summary.read_text()
    assert "**Timeline (attempt 1)**" in text and "runner_online_seconds" in text
