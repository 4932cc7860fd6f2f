"""The cost report's files: cost-report.md, and cost-report.png when the `plot` extra is installed.

Apart from report.py, because chart.py reads the report's figures and formatters: the writer depends on both.
"""

from __future__ import annotations

from pathlib import Path

from .chart import MissingPlotExtra, plot_report
from .report import CostReport, render_markdown


def write_report(report: CostReport, out_dir: Path) -> tuple[Path, Path | None]:
    """cost-report.md and cost-report.png in `out_dir`; the chart is None without the `plot` extra (the table is
    written first, so it is never lost to a missing chart)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = out_dir / "cost-report.md"
    markdown.write_text(render_markdown(report), encoding="utf-8")
    try:
        return markdown, plot_report(report, out_dir / "cost-report.png")
    except MissingPlotExtra:
        return markdown, None
