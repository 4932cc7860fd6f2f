"""The cost report's chart (cost-report.png): matplotlib, the `plot` extra of the gpu-runner distribution, so the
runner installs without it on the CPU runners that only launch and tear down."""

from __future__ import annotations

from pathlib import Path

from .record import HOURS_PER_MONTH
from .report import CostReport, days_text, hours_text, usd_text

PLOT_EXTRA_MISSING = (
    "matplotlib is not installed: the chart needs the gpu-runner distribution's `plot` extra "
    "(pip install 'gpu-runner[plot]'; in the generated project `uv sync` installs it with the dev group)"
)


class MissingPlotExtra(ImportError):
    """matplotlib is missing: the table is still written, the chart is not."""


def plot_report(report: CostReport, path: Path) -> Path:
    """Left: always-on vs this setup per month. Right: billed hours of the window, training vs overhead."""
    try:
        import matplotlib
    except ImportError as error:
        raise MissingPlotExtra(PLOT_EXTRA_MISSING) from error
    matplotlib.use("Agg")  # headless: CI runners have no display
    import matplotlib.pyplot as plt

    fig, (money, hours) = plt.subplots(1, 2, figsize=(11, 4.8), gridspec_kw={"width_ratios": [1.1, 1]})
    labels = ["always-on GPU", "this setup"]
    money.bar(labels[:1], [report.always_on_monthly_usd], color="#9e9e9e", label="always-on on-demand")
    money.bar(labels[1:], [report.cpu_monthly_usd], color="#90caf9", label="CPU side")
    money.bar(
        labels[1:],
        [report.gpu_monthly_usd],
        bottom=[report.cpu_monthly_usd],
        color="#1e88e5",
        label="GPU billed",
    )
    for x, total in enumerate((report.always_on_monthly_usd, report.this_setup_monthly_usd)):
        money.annotate(
            usd_text(total), (x, total), ha="center", va="bottom", xytext=(0, 3), textcoords="offset points"
        )
    money.set_ylabel(f"USD per month ({HOURS_PER_MONTH:.0f} h)")
    money.set_title(f"Per month: saving {report.saving_pct:.1f} %")
    money.set_ylim(0, max(report.always_on_monthly_usd, report.this_setup_monthly_usd) * 1.15)
    money.legend(loc="upper right", fontsize=8)

    # One bar per instance type and market: where the hours went, and how much of them was not training.
    usage = list(reversed(report.usage))  # barh draws bottom-up; the most used type on top
    names = [f"{u.instance_type}\n{u.market}" for u in usage]
    training = [u.training_hours for u in usage]
    overhead = [u.overhead_hours for u in usage]
    other = [max(u.billed_hours - t - o, 0.0) for u, t, o in zip(usage, training, overhead, strict=True)]
    hours.barh(names, training, color="#43a047", label=f"training {hours_text(report.training_hours)} h")
    hours.barh(
        names,
        overhead,
        left=training,
        color="#fb8c00",
        label=f"overhead {hours_text(report.overhead_hours)} h",
    )
    if sum(other) > 0.005 * report.gpu_hours:
        starts = [t + o for t, o in zip(training, overhead, strict=True)]
        hours.barh(
            names, other, left=starts, color="#bdbdbd", label=f"billed, neither {hours_text(sum(other))} h"
        )
    hours.set_xlabel(f"billed hours in the window ({report.runs} runs, {report.attempts} attempts)")
    hours.set_title(f"Overhead {report.overhead_pct:.1f} % of billed, spot {report.spot_share_pct:.0f} %")
    hours.legend(loc="lower right", fontsize=8)

    end = f" to {report.window_end:%Y-%m-%d}" if report.window_end else ""
    fig.suptitle(
        f"GPU cost, last {days_text(report.window_days)}{end}: {hours_text(report.gpu_hours)} GPU-h, {usd_text(report.billed_usd)}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
