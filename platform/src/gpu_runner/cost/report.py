"""What the GPU runs of the last N days cost, and what the same work would cost on an always-on GPU box.

    gpu-runner cost-report --days 30 [--experiment NAME] [--cpu-monthly-usd 80]   (make cost-report)

Two layers. The arithmetic (`summarize`, `monthly_saving_pct`) takes plain dataclasses and knows nothing of MLflow,
so the article's scenario can be checked exactly and the template's benchmark can reuse it. The reader
(`read_gpu_runs`) turns the MLflow runs, read over the tracking server's REST API, into those dataclasses, and
files.py writes the Markdown table and the PNG chart (chart.py, the `plot` extra).

Where the numbers come from: the stop job's cost record (record.py) on each run, per workflow attempt; a run's
totals are the sums over its attempts of the last point logged at each step. Runs without `billed_seconds`
(local runs, CPU CI runs) never touched a GPU instance: they are counted, not priced.

Per-month normalisation: a month is 730 h (record.HOURS_PER_MONTH), the same basis as the always-on instance.
Window figures are reported as measured and projected to a month by x 730 h / window hours; a 30-day window is
therefore scaled by 1.014.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest

from .record import (
    BILLED_SECONDS,
    COST_USD,
    DAYS_PER_MONTH,
    HOURS_PER_MONTH,
    OVERHEAD_SECONDS,
    SUMMED_METRICS,
    TAG_INSTANCE_TYPE,
    TAG_MARKET,
    TAG_ON_DEMAND_USD_PER_HOUR,
    TRAINING_SECONDS,
    last_per_step,
)

# As the training code resolves it (MLflow's own default store): the report names it when it is not a server.
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


class CostReportError(ValueError):
    """Nothing to report, or not enough to price it: the CLI prints the message and exits 2."""


# ----------------------------------------------------------------------------------------------- pure core
@dataclass(frozen=True)
class GpuRun:
    """One MLflow run that ran on a GPU instance, its metric histories already summed over its attempts."""

    run_id: str
    billed_seconds: float
    cost_usd: float
    overhead_seconds: float = 0.0
    training_seconds: float = 0.0
    attempts: int = 1
    # From the latest attempt's tags: a run whose attempts changed market is counted under its last one.
    market: str = "on-demand"
    instance_type: str = "unknown"
    on_demand_usd_per_hour: float | None = None
    name: str = ""


@dataclass(frozen=True)
class TypeUsage:
    instance_type: str
    market: str
    runs: int
    billed_hours: float
    cost_usd: float
    training_hours: float = 0.0
    overhead_hours: float = 0.0


@dataclass(frozen=True)
class CostReport:
    window_days: float
    window_start: datetime | None
    window_end: datetime | None
    experiments: tuple[str, ...]
    runs: int
    attempts: int
    excluded_runs: int
    gpu_hours: float
    training_hours: float
    overhead_hours: float
    billed_usd: float
    spot_hours: float
    usage: tuple[TypeUsage, ...]
    cpu_monthly_usd: float
    always_on_monthly_usd: float
    always_on_basis: str
    cpu_basis: str = "--cpu-monthly-usd"

    @property
    def month_factor(self) -> float:
        """Window -> month: 730 h over the window's hours."""
        return HOURS_PER_MONTH / (self.window_days * 24)

    @property
    def overhead_pct(self) -> float:
        return 100 * (self.overhead_hours / self.gpu_hours) if self.gpu_hours else 0.0

    @property
    def spot_share_pct(self) -> float:
        # A share first, then percent: all-spot is exactly 100.0, not 100 x a / a.
        return 100 * (self.spot_hours / self.gpu_hours) if self.gpu_hours else 0.0

    @property
    def cost_per_run_usd(self) -> float:
        return self.billed_usd / self.runs if self.runs else 0.0

    @property
    def gpu_hours_per_month(self) -> float:
        return self.gpu_hours * self.month_factor

    @property
    def gpu_monthly_usd(self) -> float:
        return self.billed_usd * self.month_factor

    @property
    def this_setup_monthly_usd(self) -> float:
        return self.cpu_monthly_usd + self.gpu_monthly_usd

    @property
    def saving_pct(self) -> float:
        return monthly_saving_pct(self.always_on_monthly_usd, self.cpu_monthly_usd, self.gpu_monthly_usd)


def monthly_saving_pct(always_on_monthly_usd: float, cpu_monthly_usd: float, gpu_monthly_usd: float) -> float:
    """The article's formula: (always-on - (CPU box + GPU on demand)) / always-on, in percent."""
    if always_on_monthly_usd <= 0:
        raise CostReportError("the always-on monthly cost must be positive to compare against it")
    return 100 * (always_on_monthly_usd - (cpu_monthly_usd + gpu_monthly_usd)) / always_on_monthly_usd


def hours(seconds: float) -> float:
    return seconds / 3600


def summarize(
    runs: Sequence[GpuRun],
    *,
    days: float,
    cpu_monthly_usd: float = 0.0,
    cpu_basis: str = "--cpu-monthly-usd",
    always_on_monthly_usd: float | None = None,
    excluded_runs: int = 0,
    experiments: Sequence[str] = (),
    window_end: datetime | None = None,
) -> CostReport:
    """The report's figures. Always-on = 730 h x the on-demand price of the most used type (by billed hours)
    unless `always_on_monthly_usd` is given (e.g. the article's $500 box)."""
    if days <= 0 or not math.isfinite(days):
        raise CostReportError(f"--days must be a positive number (got {days})")
    if not runs:
        raise CostReportError("no GPU runs to report")
    if cpu_monthly_usd < 0:
        raise CostReportError(f"--cpu-monthly-usd cannot be negative (got {cpu_monthly_usd})")
    grouped: dict[tuple[str, str], list[GpuRun]] = defaultdict(list)
    for run in runs:
        grouped[(run.instance_type, run.market)].append(run)
    usage = tuple(
        sorted(
            (
                TypeUsage(
                    instance_type=itype,
                    market=market,
                    runs=len(members),
                    billed_hours=hours(sum(r.billed_seconds for r in members)),
                    cost_usd=sum(r.cost_usd for r in members),
                    training_hours=hours(sum(r.training_seconds for r in members)),
                    overhead_hours=hours(sum(r.overhead_seconds for r in members)),
                )
                for (itype, market), members in grouped.items()
            ),
            key=lambda u: (-u.billed_hours, u.instance_type, u.market),
        )
    )
    if always_on_monthly_usd is not None:
        always_on, basis = always_on_monthly_usd, f"${always_on_monthly_usd:,.2f}/month (given)"
    else:
        always_on, basis = _always_on_from_prices(runs)
    return CostReport(
        window_days=days,
        window_start=window_end - timedelta(days=days) if window_end else None,
        window_end=window_end,
        experiments=tuple(experiments),
        runs=len(runs),
        attempts=sum(r.attempts for r in runs),
        excluded_runs=excluded_runs,
        gpu_hours=hours(sum(r.billed_seconds for r in runs)),
        training_hours=hours(sum(r.training_seconds for r in runs)),
        overhead_hours=hours(sum(r.overhead_seconds for r in runs)),
        billed_usd=sum(r.cost_usd for r in runs),
        spot_hours=hours(sum(r.billed_seconds for r in runs if r.market == "spot")),
        usage=usage,
        cpu_monthly_usd=cpu_monthly_usd,
        always_on_monthly_usd=always_on,
        always_on_basis=basis,
        cpu_basis=cpu_basis,
    )


def _always_on_from_prices(runs: Sequence[GpuRun]) -> tuple[float, str]:
    by_type: dict[str, float] = defaultdict(float)
    for run in runs:
        by_type[run.instance_type] += run.billed_seconds
    # Most billed hours first; the name breaks ties so the choice does not depend on run order.
    ranked = sorted(by_type, key=lambda t: (-by_type[t], t))
    chosen = ranked[0]
    prices = {
        r.on_demand_usd_per_hour for r in runs if r.instance_type == chosen and r.on_demand_usd_per_hour
    }
    if not prices:
        raise CostReportError(
            f"the runs of {chosen} carry no {TAG_ON_DEMAND_USD_PER_HOUR} tag: "
            "pass --always-on-monthly-usd to say what an always-on GPU box costs per month"
        )
    price = max(prices)  # one price per type and region; several regions -> the dearer, stated below
    basis = f"{HOURS_PER_MONTH:.0f} h x ${price:.4g}/h on-demand {chosen}"
    if len(ranked) > 1:
        basis += f" (the most used of {len(ranked)} types: {', '.join(ranked)})"
    if len(prices) > 1:
        basis += f" (the highest of its prices {', '.join(f'${p:.4g}' for p in sorted(prices))})"
    return HOURS_PER_MONTH * price, basis


# ------------------------------------------------------------------------------------------------- output
def usd_text(value: float) -> str:
    # Cents hide a short job's cost (a 5-minute spot job is a fraction of a cent): more digits below $0.10.
    return f"${value:,.2f}" if value == 0 or abs(value) >= 0.1 else f"${value:.4f}"


def days_text(days: float) -> str:
    return "1 day" if days == 1 else f"{days:g} days"


def hours_text(value: float) -> str:
    return f"{value:,.2f}" if value == 0 or abs(value) >= 0.1 else f"{value:.3f}"


def render_markdown(report: CostReport) -> str:
    f = report.month_factor
    if report.window_end is not None and report.window_start is not None:
        span = f"{report.window_start:%Y-%m-%d %H:%M} -> {report.window_end:%Y-%m-%d %H:%M} UTC"
    else:
        span = f"{report.window_days:g} days"
    where = ", ".join(f"`{name}`" for name in report.experiments) or "given runs"
    rows = [
        ("window", f"last {days_text(report.window_days)} ({span})"),
        ("experiment(s)", where),
        ("GPU runs (workflow attempts)", f"{report.runs} ({report.attempts})"),
        ("runs without cost metrics (local / CPU, excluded)", str(report.excluded_runs)),
        ("GPU hours, billed", f"{hours_text(report.gpu_hours)} h"),
        ("training hours", f"{hours_text(report.training_hours)} h"),
        (
            "overhead (boot, setup, teardown)",
            f"{hours_text(report.overhead_hours)} h = {report.overhead_pct:.1f} % of billed",
        ),
        ("spot share of billed hours", f"{report.spot_share_pct:.1f} %"),
        ("billed cost (instance + root volume)", usd_text(report.billed_usd)),
        ("cost per run", usd_text(report.cost_per_run_usd)),
        (
            "GPU per month (projection)",
            f"{usd_text(report.gpu_monthly_usd)} for {report.gpu_hours_per_month:,.1f} h "
            f"(window x {HOURS_PER_MONTH:.0f} h / {report.window_days * 24:g} h = x {f:.4f})",
        ),
        ("CPU side per month", f"{usd_text(report.cpu_monthly_usd)} ({report.cpu_basis})"),
        ("**this setup per month**", f"**{usd_text(report.this_setup_monthly_usd)}**"),
        (
            "**always-on GPU per month**",
            f"**{usd_text(report.always_on_monthly_usd)}** ({report.always_on_basis})",
        ),
        ("**saving vs always-on**", f"**{report.saving_pct:.1f} %**"),
    ]
    lines = [
        f"## GPU cost report: last {days_text(report.window_days)}",
        "",
        "| figure | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in rows),
        "",
        "| instance type | market | runs | billed hours | billed cost |",
        "|---|---|---:|---:|---:|",
        *(
            f"| {u.instance_type} | {u.market} | {u.runs} | {hours_text(u.billed_hours)} | {usd_text(u.cost_usd)} |"
            for u in report.usage
        ),
        "",
        f"A month is {HOURS_PER_MONTH:.0f} h ({DAYS_PER_MONTH:.2f} days). Saving = (always-on - (CPU side + GPU "
        "per month)) / always-on. Not in the figures: S3 and MLflow storage, data transfer, the CPU runners "
        "GitHub hosts.",
    ]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------- MLflow reader
def tracking_uri(env: Mapping[str, str] | None = None) -> str:
    """MLFLOW_TRACKING_URI, else MLflow's local default store, as the training code resolves it."""
    env = os.environ if env is None else env
    return env.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def _client(uri: str) -> MlflowRest:
    """A REST client for `uri` with the MLFLOW_TRACKING_* credentials of the environment."""
    client = MlflowRest.from_env({**os.environ, "MLFLOW_TRACKING_URI": uri})
    if client is None:
        raise CostReportError(
            f"MLFLOW_TRACKING_URI is {uri!r}, not an http(s) tracking server: the stop job logs each attempt's "
            "cost only to a server (a local store dies with the CI job), so the report reads one: set "
            "MLFLOW_TRACKING_URI to the server train.yml logs to (its repository variable MLFLOW_TRACKING_URI)"
        )
    return client


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def _pairs(items: Sequence[Mapping[str, Any]], value: str) -> dict[str, Any]:
    """MLflow's REST run data (lists of {"key": ..., value: ...}) as a dict."""
    return {item["key"]: item.get(value) for item in items}


def _gpu_run(client: MlflowRest, run: Mapping[str, Any]) -> GpuRun:
    info, data = run.get("info", {}), run.get("data", {})
    run_id, tags = info["run_id"], _pairs(data.get("tags", []), "value")
    per_step = {name: last_per_step(client.metric_history(run_id, name)) for name in SUMMED_METRICS}
    return GpuRun(
        run_id=run_id,
        name=info.get("run_name") or "",
        billed_seconds=sum(per_step[BILLED_SECONDS].values()),
        cost_usd=sum(per_step[COST_USD].values()),
        overhead_seconds=sum(per_step[OVERHEAD_SECONDS].values()),
        training_seconds=sum(per_step[TRAINING_SECONDS].values()),
        attempts=len(per_step[BILLED_SECONDS]),
        market=tags.get(TAG_MARKET) or "unknown",
        instance_type=tags.get(TAG_INSTANCE_TYPE) or "unknown",
        on_demand_usd_per_hour=_float(tags.get(TAG_ON_DEMAND_USD_PER_HOUR)),
    )


def experiment_from_config(path: Path) -> str:
    """`tracking.experiment_name` of the training config: the experiment the report reads by default."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CostReportError(
            f"--config {path}: {error.strerror or error}; pass --experiment NAME or --config PATH"
        ) from None
    except yaml.YAMLError as error:
        raise CostReportError(
            f"--config {path}: not YAML ({error}); fix the file or pass --experiment NAME"
        ) from None
    tracking = config.get("tracking") if isinstance(config, dict) else None
    name = tracking.get("experiment_name") if isinstance(tracking, dict) else None
    if not isinstance(name, str) or not name:
        raise CostReportError(f"--config {path} sets no tracking.experiment_name: pass --experiment NAME")
    return name


def read_gpu_runs(
    experiments: Sequence[str], days: float, *, uri: str | None = None, now: datetime | None = None
) -> tuple[list[GpuRun], int]:
    """GPU runs of the named experiments started in the last `days` days, and how many runs were not GPU runs."""
    uri = uri or tracking_uri()
    client = _client(uri)
    try:
        ids = []
        for name in experiments:
            experiment_id = client.experiment_id(name)
            if experiment_id is None:
                raise CostReportError(
                    f"no MLflow experiment named {name!r} at {uri} (check --experiment and MLFLOW_TRACKING_URI)"
                )
            ids.append(experiment_id)
        now = now or datetime.now(UTC)
        since_ms = int((now - timedelta(days=days)).timestamp() * 1000)
        found = client.search_runs(ids, f"attributes.start_time >= {since_ms}")
        runs, excluded = [], 0
        for run in found:
            # The latest value is in the search result: no history requests for runs that never had a GPU.
            if BILLED_SECONDS not in _pairs(run.get("data", {}).get("metrics", []), "value"):
                excluded += 1
                continue
            runs.append(_gpu_run(client, run))
    except MlflowError as error:
        raise CostReportError(f"MLflow at {uri}: {error}") from None
    return runs, excluded


def cost_report(
    experiments: Sequence[str],
    days: float,
    *,
    cpu_monthly_usd: float = 0.0,
    cpu_basis: str = "--cpu-monthly-usd",
    always_on_monthly_usd: float | None = None,
    uri: str | None = None,
    now: datetime | None = None,
) -> CostReport:
    """Read the runs and summarise them; a window without GPU runs is a CostReportError naming the knobs."""
    if days <= 0 or not math.isfinite(days):
        raise CostReportError(f"--days must be a positive number (got {days})")
    now = now or datetime.now(UTC)
    runs, excluded = read_gpu_runs(experiments, days, uri=uri, now=now)
    if not runs:
        names = ", ".join(repr(name) for name in experiments)
        raise CostReportError(
            f"no GPU runs (runs with a billed_seconds metric) in experiment(s) {names} started in the last "
            f"{days:g} days ({excluded} run(s) without cost metrics) at {uri or tracking_uri()}: "
            "widen --days or pick another --experiment"
        )
    return summarize(
        runs,
        days=days,
        cpu_monthly_usd=cpu_monthly_usd,
        cpu_basis=cpu_basis,
        always_on_monthly_usd=always_on_monthly_usd,
        excluded_runs=excluded,
        experiments=experiments,
        window_end=now,
    )
