"""What one attempt's GPU instance cost: billed time x the price of the type, market and zone actually used,
plus its root volume (record.Cost); logged to the training run in MLflow (record.mlflow_record) and to the stop
job's summary.

Nothing here fails the teardown: the instance is gone by now, and a failing price lookup or MLflow only warns.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from gpu_runner.core.aws import Aws
from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest

from . import pricing
from .record import (
    BILLED_SECONDS,
    TRAINING_SECONDS,
    Cost,
    latest_at_step,
    mlflow_record,
    number,
    overhead_seconds,
)

log = logging.getLogger(__name__)


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
) -> Cost:
    """The cost of a described (terminated) instance; prices come from AWS or, failing that, the table."""
    table = pricing.load_table() if table is None else table
    instance_type = instance["InstanceType"]
    zone = instance.get("Placement", {}).get("AvailabilityZone", "")
    market = market_of(instance)
    on_demand = pricing.on_demand_price(aws, instance_type, region, table=table)
    price = on_demand
    if market == "spot":
        start = instance["LaunchTime"]
        end = start + timedelta(seconds=billed_seconds)
        price = pricing.spot_price(aws, instance_type, region, zone, start, end, table=table)
    volume = pricing.volume_price(region, table=table)
    return Cost(instance_type, market, region, zone, billed_seconds, volume_gb, price, on_demand, volume)


def log_to_mlflow(cost: Cost, *, run_id: str, attempt: int, env: Mapping[str, str]) -> float | None:
    """Add this attempt's cost to the (already ended) training run; returns the overhead, None when not logged.

    Never raises: the instance is gone by now, and a failing MLflow must not fail the teardown."""
    if not run_id:
        log.info("cost not logged to MLflow: no run id (the training did not start a run)")
        return None
    client = MlflowRest.from_env(env)
    if client is None:
        log.info("cost not logged to MLflow: MLFLOW_TRACKING_URI is not an http(s) tracking server")
        return None
    try:
        run = client.get_run(run_id)
        if run.get("info", {}).get("lifecycle_stage") == "deleted":
            log.warning("warning: cost not logged: MLflow run %s is deleted", run_id)
            return None
        training = latest_at_step(client.metric_history(run_id, TRAINING_SECONDS), attempt)
        overhead = overhead_seconds(cost.billed_seconds, training or 0.0)
        # A re-run of the stop job must not add this attempt twice (the cost report sums the attempts).
        if latest_at_step(client.metric_history(run_id, BILLED_SECONDS), attempt) is not None:
            log.info("cost of attempt %s already logged to MLflow run %s: not logged again", attempt, run_id)
            return overhead
        metrics, tags = mlflow_record(cost, overhead)
        client.log_batch(run_id, metrics, tags, step=attempt)
    except MlflowError as error:
        log.warning("warning: cost not logged to MLflow run %s: %s", run_id, error)
        return None
    log.info("cost logged to MLflow run %s (attempt %s): $%.4f", run_id, attempt, cost.total_usd)
    return overhead


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def summary_line(cost: Cost, *, attempt: int, overhead: float | None, slot: str = "") -> str:
    overhead_text = (
        f"overhead {_duration(overhead)} (boot, setup, teardown)"
        if overhead is not None
        else "overhead unknown (not logged to MLflow)"
    )
    return (
        f"**GPU cost ({f'slot {slot}, ' if slot else ''}attempt {attempt})**: ${cost.total_usd:.4f} for {cost.instance_type} {cost.market} in "
        f"{cost.availability_zone or cost.region}: {_duration(cost.billed_seconds)} billed "
        f"({cost.billed_seconds} s) at ${number(cost.price.usd)}/h ({cost.price.source}) + "
        f"{cost.volume_gb} GB gp3 ${cost.volume_usd:.4f}; {overhead_text}"
    )
