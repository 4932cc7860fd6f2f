"""The cost record of one attempt: per-second billing with the root volume prorated over a 730-hour month, the
overhead, the price tags, and the last value per step that the stop job and the cost report both read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpu_runner.cost import pricing, record
from gpu_runner.cost.record import Cost
from gpu_runner.ec2_runner import lifecycle
from gpu_runner_testing.aws_constants import REGION

TABLE_SOURCE = f"bundled-table-{pricing.load_table()['as_of']}"


def make_cost(billed: int, *, usd: float = 0.526, volume_gb: int = 100, gp3: float = 0.08) -> Cost:
    return Cost(
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
    assert record.overhead_seconds(billed, 12.5) == 47.5
    assert (
        record.overhead_seconds(billed, 75.0) == 0.0
    )  # training measured longer than billed: never negative


def test_price_tags_have_no_exponent() -> None:
    assert [record.number(v) for v in (0.00001, 0.526, 0.0, 12.24)] == ["0.00001", "0.526", "0", "12.24"]


def test_the_last_value_logged_at_a_step_counts_once() -> None:
    # A write the stop job retried leaves two points at step 2: only the later one counts.
    history = [
        {"step": 1, "timestamp": 10, "value": 60.0},
        {"step": 2, "timestamp": 30, "value": 120.0},
        {"step": 2, "timestamp": 20, "value": 99_999.0},
    ]
    assert record.last_per_step(history) == {1: 60.0, 2: 120.0}
    assert record.latest_at_step(history, 2) == 120.0
    assert record.latest_at_step(history, 3) is None
