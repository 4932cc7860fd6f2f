"""Teardown's cost accounting of one attempt: priced, logged to the training run on a real MLflow tracking server
(once per attempt, even when the stop job runs twice) and to the job summary, and never failing the teardown.
"""

from __future__ import annotations

import logging
import socket
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from gpu_runner.core.aws import Aws
from gpu_runner.cost import accounting, pricing
from gpu_runner.cost.record import Cost
from gpu_runner.ec2_runner import lifecycle
from gpu_runner.ec2_runner.ownership import RunScope
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.price_answers import get_products_answer, price_list_product, spot_history_xml


class Said:
    """Everything the teardown said: its printed lines and its modules' log records (INFO and up)."""

    def __init__(self, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
        self.capsys, self.caplog, self.printed = capsys, caplog, ""
        caplog.set_level(logging.INFO)

    def text(self) -> str:
        self.printed += self.capsys.readouterr().out
        return self.printed + "\n".join(self.caplog.messages)


@pytest.fixture
def said(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> Said:
    return Said(capsys, caplog)


def make_cost(billed: int) -> Cost:
    usd = pricing.Price(0.526, "aws-pricing-api")
    return Cost(
        "g4dn.xlarge", "on-demand", REGION, "us-east-1a", billed, 100, usd, usd, pricing.Price(0.08, "table")
    )


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_summary_line_says_what_was_billed() -> None:
    line = accounting.summary_line(make_cost(4000), attempt=2, overhead=412.0)
    assert line.startswith("**GPU cost (attempt 2)**: $0.5966 for g4dn.xlarge on-demand in us-east-1a")
    assert "1 h 06 min 40 s billed (4000 s) at $0.526/h (aws-pricing-api)" in line
    assert "100 GB gp3 $0.0122" in line and "overhead 6 min 52 s (boot, setup, teardown)" in line
    assert "overhead unknown" in accounting.summary_line(make_cost(60), attempt=1, overhead=None)


@pytest.fixture
def training_run(mlflow_server: str) -> str:
    """A finished training run, as the train job leaves it: training_seconds at step 1 (attempt 1)."""
    client = MlflowClient(mlflow_server)
    experiment = client.create_experiment(f"cost-{uuid.uuid4().hex[:8]}")
    run = client.create_run(experiment)
    client.log_metric(run.info.run_id, "training_seconds", 20.0, step=1)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def launch_and_teardown(
    settings,
    ctx,
    aws: Aws,
    github,
    faults: AwsFaults,
    *,
    run_id: str,
    attempt: int,
    env: dict[str, str],
    spot: str,
) -> lifecycle.TeardownReport:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    zone = outcome.launched.availability_zone
    faults.answer(
        "pricing",
        "GetProducts",
        get_products_answer(price_list_product("g4dn.xlarge", REGION, "0.5260000000")),
    )
    faults.answer(
        "ec2",
        "DescribeSpotPriceHistory",
        spot_history_xml([(zone, spot, datetime.now(UTC) - timedelta(days=2))]),
    )
    return lifecycle.teardown(
        aws, github, RunScope(ctx, settings.project, settings.ssm_prefix), region=REGION,
        instance_id=outcome.launched.instance_id, runner_id=outcome.runner_id,
        parameter=outcome.parameter, cost_request=lifecycle.CostRequest(100, run_id, attempt, env),
    )  # fmt: skip


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_teardown_logs_each_attempts_cost_to_the_training_run(
    settings, ctx, aws, github, faults, mlflow_server: str, training_run: str, tmp_path: Path, said: Said
) -> None:
    summary = tmp_path / "summary.md"
    env = {"MLFLOW_TRACKING_URI": mlflow_server, "GITHUB_STEP_SUMMARY": str(summary)}
    report = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id=training_run, attempt=1, env=env, spot="0.2104"
    )
    # Launched just now: the 60-second minimum.
    assert report.cost is not None and report.billed_seconds == 60, said.text()
    client = MlflowClient(mlflow_server)
    run = client.get_run(training_run)
    volume = 100 * 0.08 * 60 / 3600 / 730
    expected = {
        "billed_seconds": 60.0,
        "price_usd_per_hour": 0.2104,
        "volume_cost_usd": pytest.approx(volume),
        "cost_usd": pytest.approx(0.2104 * 60 / 3600 + volume),
        "overhead_seconds": 40.0,  # 60 billed - 20 training
    }
    for key, value in expected.items():
        assert history(client, training_run, key) == [(1, value)], key
    zone = report.cost.availability_zone
    assert zone.startswith(REGION)
    assert {k: v for k, v in run.data.tags.items() if k.startswith("cost.")} == {
        "cost.instance_type": "g4dn.xlarge", "cost.market": "spot", "cost.availability_zone": zone,
        "cost.region": REGION, "cost.price_usd_per_hour": "0.2104", "cost.price_source": "ec2-spot-price-history",
        "cost.on_demand_usd_per_hour": "0.526", "cost.on_demand_source": "aws-pricing-api", "cost.volume_gb": "100",
    }  # fmt: skip
    total = 0.2104 * 60 / 3600 + volume
    assert summary.read_text().startswith(
        f"**GPU cost (attempt 1)**: ${total:.4f} for g4dn.xlarge spot in {zone}"
    )

    # Attempt 2 (a resumed run: same MLflow run) adds step 2 and leaves step 1 alone.
    client.log_metric(training_run, "training_seconds", 75.0, step=2)
    launch_and_teardown(
        settings, ctx, aws, github, faults, run_id=training_run, attempt=2, env=env, spot="0.3"
    )
    assert history(client, training_run, "billed_seconds") == [(1, 60.0), (2, 60.0)]
    assert history(client, training_run, "price_usd_per_hour") == [(1, 0.2104), (2, 0.3)]
    assert history(client, training_run, "overhead_seconds") == [(1, 40.0), (2, 0.0)]  # floored
    assert client.get_run(training_run).data.tags["cost.price_usd_per_hour"] == "0.3"  # the latest attempt
    assert summary.read_text().count("**GPU cost (attempt") == 2


def test_teardown_run_twice_logs_the_attempt_once(
    settings, ctx, aws, github, faults, mlflow_server: str, training_run: str, said: Said
) -> None:
    env = {"MLFLOW_TRACKING_URI": mlflow_server}
    launch_and_teardown(
        settings, ctx, aws, github, faults, run_id=training_run, attempt=1, env=env, spot="0.2"
    )
    request = lifecycle.CostRequest(100, training_run, 1, env)
    again = lifecycle.teardown(
        aws, github, RunScope(ctx, settings.project, settings.ssm_prefix), region=REGION,
        instance_id=report_instance(aws), cost_request=request,
    )  # fmt: skip
    assert again.cost is not None
    assert "already logged" in said.text()
    assert len(MlflowClient(mlflow_server).get_metric_history(training_run, "cost_usd")) == 1


def report_instance(aws: Aws) -> str:
    """The most recently launched instance (terminated by now)."""
    reply = aws.client("ec2", REGION).describe_instances()
    instances = [i for r in reply["Reservations"] for i in r["Instances"]]
    return max(instances, key=lambda i: i["LaunchTime"])["InstanceId"]


@pytest.mark.slow  # waits through the MLflow client's retries of a closed port
def test_unreachable_mlflow_never_fails_the_teardown(
    settings, ctx, aws, github, faults, github_double, tmp_path: Path, said: Said
) -> None:
    summary = tmp_path / "summary.md"
    env = {"MLFLOW_TRACKING_URI": closed_port_url(), "GITHUB_STEP_SUMMARY": str(summary)}
    report = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id="abc123", attempt=1, env=env, spot="0.2"
    )
    assert report.instance in {"shutting-down", "terminated"} and report.cost is not None
    assert github_double.runners == {}
    assert "warning: cost not logged to MLflow run abc123:" in said.text() and "unreachable" in said.text()
    assert "overhead unknown" in summary.read_text()


def test_unknown_run_is_a_warning(settings, ctx, aws, github, faults, mlflow_server: str, said: Said) -> None:
    env = {"MLFLOW_TRACKING_URI": mlflow_server}
    report = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id="0" * 32, attempt=1, env=env, spot="0.2"
    )
    assert report.cost is not None
    assert "warning: cost not logged to MLflow run " + "0" * 32 in said.text()
    assert "RESOURCE_DOES_NOT_EXIST" in said.text()


def test_no_tracking_server_or_run_id_skips_mlflow_with_a_reason(
    settings, ctx, aws, github, faults, said: Said
) -> None:
    launch_and_teardown(settings, ctx, aws, github, faults, run_id="abc", attempt=1, env={}, spot="0.2")
    assert "cost not logged to MLflow: MLFLOW_TRACKING_URI is not an http(s) tracking server" in said.text()
    launch_and_teardown(
        settings, ctx, aws, github, faults, run_id="", attempt=1, env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, spot="0.2"
    )  # fmt: skip
    assert "cost not logged to MLflow: no run id" in said.text()


def test_a_pricing_crash_never_fails_the_teardown(
    settings, ctx, aws, github, github_double, monkeypatch: pytest.MonkeyPatch, said: Said
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Cost:
        raise RuntimeError("prices.json is corrupt")

    monkeypatch.setattr(accounting, "estimate", broken)
    outcome = lifecycle.launch(settings, ctx, aws, github)
    report = lifecycle.teardown(
        aws, github, RunScope(ctx, settings.project, settings.ssm_prefix), region=REGION,
        instance_id=outcome.launched.instance_id, runner_id=outcome.runner_id,
        parameter=outcome.parameter, cost_request=lifecycle.CostRequest(100, "", 1, {}),
    )  # fmt: skip
    assert report.cost is None and report.runner == "deleted"
    assert "warning: cost not computed: RuntimeError: prices.json is corrupt" in said.text()
