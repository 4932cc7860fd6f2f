"""What one attempt's GPU instance cost: billed time x the price of the type, market and zone actually used,
plus its root volume; logged to the training run in MLflow and to the stop job's summary.

The MLflow record (read by the project's cost report), on the training run, per attempt (step = attempt):
- metrics: billed_seconds, cost_usd (instance + root volume), volume_cost_usd, overhead_seconds
  (billed_seconds - that attempt's training_seconds, at least 0), price_usd_per_hour;
- tags (the latest attempt wins): cost.instance_type, cost.market, cost.availability_zone, cost.region,
  cost.price_usd_per_hour, cost.price_source, cost.on_demand_usd_per_hour, cost.on_demand_source,
  cost.volume_gb.
`training_seconds` is logged by the training code (same step); teardown only reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from . import pricing
from .aws import Aws
from .mlflow_rest import MlflowError, MlflowRest

Log = Callable[[str], None]
HOURS_PER_MONTH = 730  # AWS prices EBS per GB-month and prorates by the hour on a 730-hour month
TRAINING_SECONDS = "training_seconds"


@dataclass(frozen=True)
class Cost:
    instance_type: str
    market: str  # spot | on-demand
    region: str
    availability_zone: str
    billed_seconds: int
    volume_gb: int
    price: pricing.Price  # USD per hour of the instance, in its market
    on_demand: pricing.Price  # USD per hour of the same type on demand (what the cost report compares with)
    volume_price: pricing.Price  # USD per GB-month of gp3

    @property
    def instance_usd(self) -> float:
        return self.price.usd * self.billed_seconds / 3600

    @property
    def volume_usd(self) -> float:
        return self.volume_price.usd * self.volume_gb * self.billed_seconds / 3600 / HOURS_PER_MONTH

    @property
    def total_usd(self) -> float:
        return self.instance_usd + self.volume_usd


def market_of(instance: Mapping[str, Any]) -> str:
    return "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand"


def estimate(
    aws: Aws,
    instance: Mapping[str, Any],
    *,
    region: str,
    billed_seconds: int,
    volume_gb: int,
    table: Mapping[str, Any] | None = None,
    log: Log = print,
) -> Cost:
    """The cost of a described (terminated) instance; prices come from AWS or, failing that, the table."""
    table = pricing.load_table() if table is None else table
    instance_type = instance["InstanceType"]
    zone = instance.get("Placement", {}).get("AvailabilityZone", "")
    market = market_of(instance)
    on_demand = pricing.on_demand_price(aws, instance_type, region, table=table, log=log)
    price = on_demand
    if market == "spot":
        start = instance["LaunchTime"]
        end = start + timedelta(seconds=billed_seconds)
        price = pricing.spot_price(aws, instance_type, region, zone, start, end, table=table, log=log)
    volume = pricing.volume_price(region, table=table, log=log)
    return Cost(instance_type, market, region, zone, billed_seconds, volume_gb, price, on_demand, volume)


def number(value: float) -> str:
    """A price as a tag: plain decimals, no exponent, no trailing zeros (0.00001, 0.526, 0)."""
    return f"{value:.6f}".rstrip("0").rstrip(".") or "0"


def overhead_seconds(billed: int, training_seconds: float) -> float:
    """Billed time not spent in the training loop: boot, setup (image, runner, checkout) and teardown."""
    return max(0.0, billed - training_seconds)


def mlflow_record(cost: Cost, overhead: float) -> tuple[dict[str, float], dict[str, str]]:
    metrics = {
        "billed_seconds": float(cost.billed_seconds),
        "cost_usd": cost.total_usd,
        "volume_cost_usd": cost.volume_usd,
        "overhead_seconds": overhead,
        "price_usd_per_hour": cost.price.usd,
    }
    tags = {
        "cost.instance_type": cost.instance_type,
        "cost.market": cost.market,
        "cost.availability_zone": cost.availability_zone,
        "cost.region": cost.region,
        "cost.price_usd_per_hour": number(cost.price.usd),
        "cost.price_source": cost.price.source,
        "cost.on_demand_usd_per_hour": number(cost.on_demand.usd),
        "cost.on_demand_source": cost.on_demand.source,
        "cost.volume_gb": str(cost.volume_gb),
    }
    return metrics, tags


def log_to_mlflow(
    cost: Cost, *, run_id: str, attempt: int, env: Mapping[str, str], log: Log = print
) -> float | None:
    """Add this attempt's cost to the (already ended) training run; returns the overhead, None when not logged.

    Never raises: the instance is gone by now, and a failing MLflow must not fail the teardown."""
    if not run_id:
        log("cost not logged to MLflow: no run id (the training did not start a run)")
        return None
    client = MlflowRest.from_env(env)
    if client is None:
        log("cost not logged to MLflow: MLFLOW_TRACKING_URI is not an http(s) tracking server")
        return None
    try:
        run = client.get_run(run_id)
        if run.get("info", {}).get("lifecycle_stage") == "deleted":
            log(f"warning: cost not logged: MLflow run {run_id} is deleted")
            return None
        training = latest_at_step(client.metric_history(run_id, TRAINING_SECONDS), attempt)
        overhead = overhead_seconds(cost.billed_seconds, training or 0.0)
        # A re-run of the stop job must not add this attempt twice (the cost report sums the attempts).
        if latest_at_step(client.metric_history(run_id, "billed_seconds"), attempt) is not None:
            log(f"cost of attempt {attempt} already logged to MLflow run {run_id}: not logged again")
            return overhead
        metrics, tags = mlflow_record(cost, overhead)
        client.log_batch(run_id, metrics, tags, step=attempt)
    except MlflowError as error:
        log(f"warning: cost not logged to MLflow run {run_id}: {error}")
        return None
    log(f"cost logged to MLflow run {run_id} (attempt {attempt}): ${cost.total_usd:.4f}")
    return overhead


def latest_at_step(history: list[dict[str, Any]], step: int) -> float | None:
    """The value logged last at `step` (MLflow keeps every point; a retried write leaves several)."""
    points = [m for m in history if int(m.get("step", 0)) == step]
    latest = max(points, key=lambda m: int(m.get("timestamp", 0)), default=None)
    return float(latest["value"]) if latest else None


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def summary_line(cost: Cost, *, attempt: int, overhead: float | None) -> str:
    overhead_text = (
        f"overhead {_duration(overhead)} (boot, setup, teardown)"
        if overhead is not None
        else "overhead unknown (not logged to MLflow)"
    )
    return (
        f"**GPU cost (attempt {attempt})**: ${cost.total_usd:.4f} for {cost.instance_type} {cost.market} in "
        f"{cost.availability_zone or cost.region}: {_duration(cost.billed_seconds)} billed "
        f"({cost.billed_seconds} s) at ${number(cost.price.usd)}/h ({cost.price.source}) + "
        f"{cost.volume_gb} GB gp3 ${cost.volume_usd:.4f}; {overhead_text}"
    )
