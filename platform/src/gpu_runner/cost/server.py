"""The team MLflow server's monthly cost (gpu_runner/mlflow_server/mlflow-server.yaml): the CPU side of `gpu-runner cost-report`.

Instance hours from its schedules (always on without them), priced like the GPU instances (Pricing API, then the
bundled table), plus its root and data volumes at the gp3 price. Snapshots and S3 artifacts are left out: a few
cents a month for a tracking database, and the bucket is shared with the training data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.core.aws import Aws

from . import pricing
from .record import HOURS_PER_MONTH

# gpu_runner/mlflow_server/mlflow-server.yaml's launch template: the root volume, 8 GiB gp3 (a test holds the two together).
ROOT_VOLUME_GB = 8
# The form `mlflow-server up --stop-schedule / --start-schedule` suggests: minute, hour, any day of the month,
# every month, the days of the week, every year (EventBridge Scheduler cron expressions).
WEEKLY = re.compile(r"cron\((\d{1,2}) (\d{1,2}) \? \* ([A-Z,-]+) \*\)")
WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
HOURS_PER_WEEK = 7 * 24


@dataclass(frozen=True)
class ServerCost:
    monthly_usd: float
    basis: str  # what the report prints beside the figure


def _days(field: str) -> set[str] | None:
    days: set[str] = set()
    for part in field.split(","):
        first, _, last = part.partition("-")
        if first not in WEEKDAYS or (last and last not in WEEKDAYS):
            return None
        start, end = WEEKDAYS.index(first), WEEKDAYS.index(last or first)
        if end < start:
            return None
        days.update(WEEKDAYS[start : end + 1])
    return days


def running_hours_per_month(stop_schedule: str, start_schedule: str) -> tuple[float, str]:
    """Hours a month the server runs, and how that was counted. A schedule this cannot read counts as always on:
    the report then shows an upper bound, never a saving that is not there."""
    if not stop_schedule:
        return HOURS_PER_MONTH, "always on"
    if not start_schedule:
        return HOURS_PER_MONTH, "started on demand (no start schedule): counted always on, an upper bound"
    stop, start = WEEKLY.fullmatch(stop_schedule), WEEKLY.fullmatch(start_schedule)
    stop_days, start_days = (_days(m.group(3)) if m else None for m in (stop, start))
    if not (stop and start and stop_days and stop_days == start_days):
        return (
            HOURS_PER_MONTH,
            "schedules not of the form cron(M H ? * DAYS *) with the same days: counted always on",
        )
    stop_at = int(stop.group(2)) + int(stop.group(1)) / 60
    start_at = int(start.group(2)) + int(start.group(1)) / 60
    per_day = (stop_at - start_at) % 24
    weekly = per_day * len(stop_days)
    return weekly * HOURS_PER_MONTH / HOURS_PER_WEEK, f"{per_day:g} h on {len(stop_days)} days a week"


def server_cost(
    aws: Aws, parameters: Mapping[str, str], region: str, *, table: Mapping[str, Any] | None = None
) -> ServerCost:
    """`parameters`: the server stack's (InstanceType, DataVolumeGb, StopSchedule, StartSchedule)."""
    table = pricing.load_table() if table is None else table
    instance_type = parameters["InstanceType"]
    hours, counted = running_hours_per_month(
        parameters.get("StopSchedule", ""), parameters.get("StartSchedule", "")
    )
    price = pricing.on_demand_price(aws, instance_type, region, table=table)
    gb = ROOT_VOLUME_GB + int(parameters.get("DataVolumeGb", "8"))
    storage = pricing.volume_price(region, table=table)
    monthly = hours * price.usd + gb * storage.usd
    basis = (
        f"team MLflow server {instance_type}: {hours:,.0f} h ({counted}) x ${price.usd:.4f}/h ({price.source}) "
        f"+ {gb} GB gp3 x ${storage.usd:.3f}"
    )
    return ServerCost(monthly, basis)


def deployed_server_parameters(cfn: Any, stack_name: str) -> dict[str, str] | None:
    """The server stack's parameters, or None when there is no such stack (or it cannot be read)."""
    try:
        described = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    except (ClientError, BotoCoreError):
        return None
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in described.get("Parameters", [])}
