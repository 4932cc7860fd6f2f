"""The cost report: the article's arithmetic through the pure core, the MLflow reader against a real tracking
server, and the `gpu-runner cost-report` command (the table on stdout, the chart with the `plot` extra)."""

from __future__ import annotations

import re
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from gpu_runner.cli import main
from gpu_runner.cost import chart, files
from gpu_runner.cost import report as cr

# ------------------------------------------------------------------------------ the article's scenario
# Always-on T4 box $500/month; new way: CPU dev box $80/month + 100 GPU-hours on demand at $0.5/h = $130.
# The window is one month of the report's own definition (730 h), so nothing is scaled.
ARTICLE_GPU_HOURS, ARTICLE_PRICE, ARTICLE_ALWAYS_ON, ARTICLE_CPU = 100, 0.5, 500.0, 80.0


def article_runs(jobs: int = 50) -> list[cr.GpuRun]:
    """100 GPU-hours as `jobs` equal on-demand jobs, each billed at $0.5/h."""
    seconds = ARTICLE_GPU_HOURS * 3600 / jobs
    return [
        cr.GpuRun(
            run_id=f"job-{index}",
            billed_seconds=seconds,
            cost_usd=seconds / 3600 * ARTICLE_PRICE,
            instance_type="g4dn.xlarge",
            market="on-demand",
            on_demand_usd_per_hour=ARTICLE_PRICE,
        )
        for index in range(jobs)
    ]


def test_the_article_scenario_saves_74_percent_with_its_cpu_box() -> None:
    report = cr.summarize(
        article_runs(jobs=1),
        days=cr.DAYS_PER_MONTH,
        cpu_monthly_usd=ARTICLE_CPU,
        always_on_monthly_usd=ARTICLE_ALWAYS_ON,
    )
    assert report.month_factor == 1.0
    assert report.gpu_hours_per_month == 100.0
    assert report.gpu_monthly_usd == 50.0
    assert report.this_setup_monthly_usd == 130.0
    assert report.always_on_monthly_usd == 500.0
    assert report.saving_pct == 74.0
    assert cr.monthly_saving_pct(500.0, 80.0, 50.0) == 74.0


def test_the_article_scenario_without_the_cpu_box_saves_90_percent() -> None:
    report = cr.summarize(
        article_runs(jobs=1), days=cr.DAYS_PER_MONTH, always_on_monthly_usd=ARTICLE_ALWAYS_ON
    )
    assert report.cpu_monthly_usd == 0.0
    assert report.this_setup_monthly_usd == 50.0
    assert report.saving_pct == 90.0


def test_default_always_on_is_730_hours_at_the_on_demand_price() -> None:
    with_cpu = cr.summarize(article_runs(jobs=1), days=cr.DAYS_PER_MONTH, cpu_monthly_usd=ARTICLE_CPU)
    assert with_cpu.always_on_monthly_usd == 365.0
    assert with_cpu.always_on_basis == "730 h x $0.5/h on-demand g4dn.xlarge"
    assert with_cpu.saving_pct == 100 * (365 - 130) / 365
    assert round(with_cpu.saving_pct, 2) == 64.38
    without_cpu = cr.summarize(article_runs(jobs=1), days=cr.DAYS_PER_MONTH)
    assert without_cpu.saving_pct == 100 * (365 - 50) / 365
    assert round(without_cpu.saving_pct, 2) == 86.30


def test_the_same_hours_in_many_jobs_cost_the_same() -> None:
    report = cr.summarize(article_runs(jobs=50), days=cr.DAYS_PER_MONTH, always_on_monthly_usd=500.0)
    assert (report.runs, report.attempts) == (50, 50)
    assert report.gpu_hours == pytest.approx(100.0, rel=1e-12)
    assert report.cost_per_run_usd == pytest.approx(1.0, rel=1e-12)
    assert report.saving_pct == pytest.approx(90.0, rel=1e-12)


def test_a_shorter_window_is_projected_to_730_hours() -> None:
    # 10 h in 15 days -> 10 x 730 / 360 h per month.
    run = cr.GpuRun("r", billed_seconds=36_000, cost_usd=5.0, on_demand_usd_per_hour=0.5)
    report = cr.summarize([run], days=15, always_on_monthly_usd=500.0)
    assert report.month_factor == 730 / 360
    assert report.gpu_hours_per_month == 10 * 730 / 360
    assert report.gpu_monthly_usd == 5.0 * 730 / 360


def test_several_types_price_always_on_by_the_most_used_and_say_so() -> None:
    runs = [
        cr.GpuRun(
            "a", billed_seconds=3600, cost_usd=1.0, instance_type="g5.xlarge", on_demand_usd_per_hour=1.006
        ),
        cr.GpuRun(
            "b", billed_seconds=7200, cost_usd=1.0, instance_type="g4dn.xlarge", on_demand_usd_per_hour=0.526
        ),
    ]
    report = cr.summarize(runs, days=30)
    assert report.always_on_monthly_usd == 730 * 0.526
    assert report.always_on_basis == (
        "730 h x $0.526/h on-demand g4dn.xlarge (the most used of 2 types: g4dn.xlarge, g5.xlarge)"
    )
    assert "the most used of 2 types" in cr.render_markdown(report)


def test_an_all_spot_month_is_exactly_100_percent_spot() -> None:
    runs = [cr.GpuRun(f"r{i}", billed_seconds=s, cost_usd=0.1, market="spot") for i, s in enumerate((12, 25))]
    assert cr.summarize(runs, days=30, always_on_monthly_usd=500.0).spot_share_pct == 100.0


def test_a_short_jobs_cost_is_not_rounded_away() -> None:
    # 5 minutes of spot at $0.21/h: $0.0175, not "$0.02", and never "$0.00" for a run that was billed.
    run = cr.GpuRun("r", billed_seconds=300, cost_usd=0.0175, market="spot", on_demand_usd_per_hour=0.526)
    text = cr.render_markdown(cr.summarize([run], days=1))
    assert "| billed cost (instance + root volume) | $0.0175 |" in text
    assert "| GPU hours, billed | 0.083 h |" in text


def test_runs_without_an_on_demand_price_need_the_always_on_figure() -> None:
    run = cr.GpuRun("r", billed_seconds=3600, cost_usd=0.5)
    with pytest.raises(cr.CostReportError, match="--always-on-monthly-usd"):
        cr.summarize([run], days=30)
    assert cr.summarize([run], days=30, always_on_monthly_usd=500.0).always_on_monthly_usd == 500.0


@pytest.mark.parametrize("days", [0, -1, float("nan")])
def test_a_window_must_be_positive(days: float) -> None:
    with pytest.raises(cr.CostReportError, match="--days"):
        cr.summarize(article_runs(jobs=1), days=days, always_on_monthly_usd=500.0)


def test_the_tracking_uri_is_read_as_training_reads_it() -> None:
    assert cr.tracking_uri({}) == "sqlite:///mlflow.db"
    assert cr.tracking_uri({"MLFLOW_TRACKING_URI": ""}) == "sqlite:///mlflow.db"
    assert cr.tracking_uri({"MLFLOW_TRACKING_URI": "http://127.0.0.1:1"}) == "http://127.0.0.1:1"


def test_a_local_store_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # The stop job logs costs only to a tracking server: a local store has none to report.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(
        cr.CostReportError, match=re.escape("'sqlite:///mlflow.db', not an http(s) tracking server")
    ):
        cr.read_gpu_runs(["any"], 30)


# ------------------------------------------------------------------------ against a real MLflow server
@dataclass(frozen=True)
class Logged:
    """An experiment on the test server holding runs in the stop job's schema, and what it should report."""

    uri: str
    experiment: str
    quiet_experiment: str  # only a run without cost metrics


def _gpu_run(
    client: MlflowClient,
    experiment_id: str,
    attempts: list[dict[str, float]],
    tags: dict[str, str],
    start: datetime | None = None,
) -> str:
    kwargs = {"start_time": int(start.timestamp() * 1000)} if start else {}
    run_id = client.create_run(experiment_id, tags=tags, **kwargs).info.run_id
    logged_at = int(datetime.now(UTC).timestamp() * 1000)
    for step, metrics in enumerate(attempts, start=1):
        for name, value in metrics.items():
            if name == "billed_seconds" and step == 2:
                # A write the stop job retried: an earlier point at the same step must not count.
                client.log_metric(run_id, name, 99_999.0, timestamp=logged_at - 1000, step=step)
            client.log_metric(run_id, name, value, timestamp=logged_at, step=step)
    client.set_terminated(run_id)
    return run_id


def _cost_tags(instance_type: str, market: str, on_demand: float) -> dict[str, str]:
    return {
        "cost.instance_type": instance_type,
        "cost.market": market,
        "cost.region": "us-east-1",
        "cost.availability_zone": "us-east-1a",
        "cost.on_demand_usd_per_hour": str(on_demand),
        "cost.on_demand_source": "test",
        "cost.volume_gb": "100",
    }


def _attempt(billed: float, cost: float, overhead: float, training: float) -> dict[str, float]:
    return {
        "billed_seconds": billed,
        "cost_usd": cost,
        "overhead_seconds": overhead,
        "training_seconds": training,
    }


@pytest.fixture(scope="module")
def logged(mlflow_server: str) -> Logged:
    client = MlflowClient(mlflow_server)
    suffix = uuid.uuid4().hex[:8]
    name, quiet = f"cost-report-{suffix}", f"cost-report-quiet-{suffix}"
    experiment_id, quiet_id = client.create_experiment(name), client.create_experiment(quiet)
    # Interrupted on spot at attempt 1, finished at attempt 2 (MLflow step = attempt).
    _gpu_run(
        client,
        experiment_id,
        [_attempt(1800, 0.12, 300, 1500), _attempt(3600, 0.30, 360, 3240)],
        _cost_tags("g4dn.xlarge", "spot", 0.526),
    )
    _gpu_run(
        client, experiment_id, [_attempt(7200, 0.50, 600, 6600)], _cost_tags("g4dn.xlarge", "spot", 0.526)
    )
    _gpu_run(
        client,
        experiment_id,
        [_attempt(3600, 0.55, 400, 3200)],
        _cost_tags("g4dn.xlarge", "on-demand", 0.526),
    )
    _gpu_run(
        client, experiment_id, [_attempt(1800, 0.53, 200, 1600)], _cost_tags("g5.xlarge", "on-demand", 1.006)
    )
    # A local or CPU CI run: no billed_seconds -> counted, not priced.
    local = client.create_run(experiment_id).info.run_id
    client.log_metric(local, "training_seconds", 50.0)
    # Outside a 30-day window: neither priced nor counted.
    _gpu_run(
        client,
        experiment_id,
        [_attempt(360_000, 99.0, 10, 10)],
        _cost_tags("g4dn.xlarge", "on-demand", 0.526),
        start=datetime.now(UTC) - timedelta(days=40),
    )
    client.log_metric(client.create_run(quiet_id).info.run_id, "training_seconds", 50.0)
    return Logged(mlflow_server, name, quiet)


@pytest.mark.slow
def test_the_reader_sums_every_attempt_of_the_windows_gpu_runs(logged: Logged) -> None:
    runs, excluded = cr.read_gpu_runs([logged.experiment], 30, uri=logged.uri)
    assert excluded == 1
    assert sorted((r.attempts, r.billed_seconds, r.market) for r in runs) == [
        (1, 1800, "on-demand"),
        (1, 3600, "on-demand"),
        (1, 7200, "spot"),
        (2, 5400, "spot"),
    ]
    multi = next(r for r in runs if r.attempts == 2)
    assert multi.cost_usd == pytest.approx(0.42)
    assert (multi.overhead_seconds, multi.training_seconds) == (660, 4740)
    assert (multi.instance_type, multi.on_demand_usd_per_hour) == ("g4dn.xlarge", 0.526)


@pytest.mark.slow
def test_the_report_over_the_server(logged: Logged, tmp_path: Path) -> None:
    report = cr.cost_report([logged.experiment], 30, uri=logged.uri)
    assert (report.runs, report.attempts, report.excluded_runs) == (4, 5, 1)
    assert report.gpu_hours == 18_000 / 3600
    assert report.training_hours == 16_140 / 3600
    assert report.overhead_pct == pytest.approx(100 * 1860 / 18_000)
    assert report.spot_share_pct == pytest.approx(70.0)
    assert report.billed_usd == pytest.approx(2.00)
    assert report.cost_per_run_usd == pytest.approx(2.00 / 4)
    assert report.always_on_monthly_usd == 730 * 0.526
    assert report.gpu_monthly_usd == pytest.approx(2.00 * 730 / 720)
    assert report.saving_pct == pytest.approx(100 * (383.98 - 2.00 * 730 / 720) / 383.98)
    assert [(u.instance_type, u.market, u.runs) for u in report.usage] == [
        ("g4dn.xlarge", "spot", 2),
        ("g4dn.xlarge", "on-demand", 1),
        ("g5.xlarge", "on-demand", 1),
    ]

    markdown, png = files.write_report(report, tmp_path / "out")
    text = markdown.read_text()
    assert "| figure | value |\n|---|---|\n" in text
    assert "| GPU hours, billed | 5.00 h |" in text
    assert "| spot share of billed hours | 70.0 % |" in text
    assert "| runs without cost metrics (local / CPU, excluded) | 1 |" in text
    assert "| g4dn.xlarge | spot | 2 | 3.50 | $0.92 |" in text
    with Image.open(png) as image:
        assert image.format == "PNG"
        assert image.width > 0 and image.height > 0


@pytest.mark.slow
def test_cost_report_command_writes_the_table_and_chart(
    logged: Logged, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", logged.uri)
    # The experiment comes from the config's tracking.experiment_name when --experiment is not given.
    config = tmp_path / "train.yaml"
    config.write_text(f"tracking:\n  experiment_name: {logged.experiment}\n")
    out = tmp_path / "report"
    code = main(
        ["cost-report", "--config", str(config), "--days", "30", "--cpu-monthly-usd", "80", "--out", str(out)]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "| CPU side per month | $80.00 (--cpu-monthly-usd) |" in printed
    assert (out / "cost-report.md").read_text() in printed
    assert (out / "cost-report.png").stat().st_size > 0


@pytest.mark.slow
def test_no_gpu_runs_in_the_window_is_a_clear_error(
    logged: Logged, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", logged.uri)
    code = main(["cost-report", "--experiment", logged.quiet_experiment, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "no GPU runs" in err and "--days" in err and "--experiment" in err
    assert "1 run(s) without cost metrics" in err
    assert "Traceback" not in err
    assert not (tmp_path / "cost-report.md").exists()


@pytest.mark.slow
def test_an_unknown_experiment_is_named(
    logged: Logged, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", logged.uri)
    assert main(["cost-report", "--experiment", "no-such-experiment-xyz"]) == 2
    assert "no MLflow experiment named 'no-such-experiment-xyz'" in capsys.readouterr().err


@pytest.mark.slow
def test_without_the_plot_extra_the_table_is_written_and_the_extra_named(
    logged: Logged, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", logged.uri)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    assert main(["cost-report", "--experiment", logged.experiment, "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert (tmp_path / "cost-report.md").read_text() in captured.out
    assert not (tmp_path / "cost-report.png").exists()
    assert f"warning: chart not drawn: {chart.PLOT_EXTRA_MISSING}" in captured.err
    assert "gpu-runner[plot]" in chart.PLOT_EXTRA_MISSING


def test_a_config_without_an_experiment_name_asks_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "train.yaml"
    config.write_text("training:\n  epochs: 1\n")
    assert main(["cost-report", "--config", str(config)]) == 2
    assert "sets no tracking.experiment_name: pass --experiment NAME" in capsys.readouterr().err
    assert main(["cost-report", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "pass --experiment NAME or --config PATH" in capsys.readouterr().err
