"""The cost record: what the stop job logs to the training run in MLflow, and what the cost report reads back.

Per attempt (MLflow step = attempt), on the training run:
- metrics: billed_seconds, cost_usd (instance + root volume), volume_cost_usd, overhead_seconds
  (billed_seconds - that attempt's training_seconds, at least 0), price_usd_per_hour;
- tags (the latest attempt wins): cost.instance_type, cost.market, cost.availability_zone, cost.region,
  cost.price_usd_per_hour, cost.price_source, cost.on_demand_usd_per_hour, cost.on_demand_source,
  cost.volume_gb.
`training_seconds` is logged by the training code (same step); the stop job and the report only read it.
MLflow keeps every point logged, so a write the stop job retried leaves two at one step: the last one logged
counts, once (`last_per_step`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .pricing import Price

# AWS prices EBS per GB-month and prorates by the hour on a 730-hour month (365 x 24 / 12 = 30.42 days); the
# report projects a window to the same month and prices an always-on box for 730 h.
HOURS_PER_MONTH = 730.0
DAYS_PER_MONTH = HOURS_PER_MONTH / 24

BILLED_SECONDS = "billed_seconds"
COST_USD = "cost_usd"
VOLUME_COST_USD = "volume_cost_usd"
OVERHEAD_SECONDS = "overhead_seconds"
PRICE_USD_PER_HOUR = "price_usd_per_hour"
TRAINING_SECONDS = "training_seconds"  # logged by the training code
# A run's totals are the sums over its attempts of these.
SUMMED_METRICS = (BILLED_SECONDS, COST_USD, OVERHEAD_SECONDS, TRAINING_SECONDS)

TAG_INSTANCE_TYPE = "cost.instance_type"
TAG_MARKET = "cost.market"
TAG_AVAILABILITY_ZONE = "cost.availability_zone"
TAG_REGION = "cost.region"
TAG_PRICE_USD_PER_HOUR = "cost.price_usd_per_hour"
TAG_PRICE_SOURCE = "cost.price_source"
TAG_ON_DEMAND_USD_PER_HOUR = "cost.on_demand_usd_per_hour"
TAG_ON_DEMAND_SOURCE = "cost.on_demand_source"
TAG_VOLUME_GB = "cost.volume_gb"


@dataclass(frozen=True)
class Cost:
    """One attempt: billed time x the price of the type, market and zone actually used, plus its root volume."""

    instance_type: str
    market: str  # spot | on-demand
    region: str
    availability_zone: str
    billed_seconds: int
    volume_gb: int
    price: Price  # USD per hour of the instance, in its market
    on_demand: Price  # USD per hour of the same type on demand (what the cost report compares with)
    volume_price: Price  # USD per GB-month of gp3

    @property
    def instance_usd(self) -> float:
        return self.price.usd * self.billed_seconds / 3600

    @property
    def volume_usd(self) -> float:
        return self.volume_price.usd * self.volume_gb * self.billed_seconds / 3600 / HOURS_PER_MONTH

    @property
    def total_usd(self) -> float:
        return self.instance_usd + self.volume_usd


def number(value: float) -> str:
    """A price as a tag: plain decimals, no exponent, no trailing zeros (0.00001, 0.526, 0)."""
    return f"{value:.6f}".rstrip("0").rstrip(".") or "0"


def overhead_seconds(billed: int, training_seconds: float) -> float:
    """Billed time not spent in the training loop: boot, setup (image, runner, checkout) and teardown."""
    return max(0.0, billed - training_seconds)


def mlflow_record(cost: Cost, overhead: float) -> tuple[dict[str, float], dict[str, str]]:
    """The attempt's metrics and tags, as logged at step = attempt."""
    metrics = {
        BILLED_SECONDS: float(cost.billed_seconds),
        COST_USD: cost.total_usd,
        VOLUME_COST_USD: cost.volume_usd,
        OVERHEAD_SECONDS: overhead,
        PRICE_USD_PER_HOUR: cost.price.usd,
    }
    tags = {
        TAG_INSTANCE_TYPE: cost.instance_type,
        TAG_MARKET: cost.market,
        TAG_AVAILABILITY_ZONE: cost.availability_zone,
        TAG_REGION: cost.region,
        TAG_PRICE_USD_PER_HOUR: number(cost.price.usd),
        TAG_PRICE_SOURCE: cost.price.source,
        TAG_ON_DEMAND_USD_PER_HOUR: number(cost.on_demand.usd),
        TAG_ON_DEMAND_SOURCE: cost.on_demand.source,
        TAG_VOLUME_GB: str(cost.volume_gb),
    }
    return metrics, tags


def last_per_step(history: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """Step (attempt) -> the value logged last at it, from a metric history as MLflow's REST API answers it
    (`{"step", "timestamp", "value"}` per point)."""
    latest: dict[int, tuple[int, float]] = {}
    for point in history:
        step, at = int(point.get("step", 0)), int(point.get("timestamp", 0))
        if step not in latest or at >= latest[step][0]:
            latest[step] = (at, float(point["value"]))
    return {step: value for step, (_, value) in latest.items()}


def latest_at_step(history: Iterable[Mapping[str, Any]], step: int) -> float | None:
    """The value logged last at `step`, None when nothing was logged there."""
    return last_per_step(history).get(step)
