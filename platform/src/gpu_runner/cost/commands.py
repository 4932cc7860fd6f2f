"""`gpu-runner cost-report`: reads MLflow (and, with --mlflow-server-of, the team server's stack): no settings
file needed, no workflow environment."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import Command, SubParsers, add_command
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import load_settings
from gpu_runner.core.stack_names import REPOSITORY, server_stack_name


def register(commands: SubParsers) -> None:
    cost = add_command(
        commands, "cost-report", Command(standalone=_cost_report),
        help="GPU hours, billed cost, overhead and spot share of the last N days vs an always-on GPU box",
    )  # fmt: skip
    cost.add_argument("--days", type=float, default=30.0, help="runs started in the last N days (default 30)")
    cost.add_argument(
        "--experiment",
        action="append",
        default=None,
        help="MLflow experiment name, repeatable (default: tracking.experiment_name of --config)",
    )
    cost.add_argument(
        "--config", type=Path, default=Path("configs/train.yaml"), help="for the experiment name"
    )
    cost.add_argument(
        "--cpu-monthly-usd",
        type=float,
        default=0.0,
        help="always-on CPU side of this setup per month, e.g. a dev box (default 0: GitHub-hosted runners)",
    )
    cost.add_argument(
        "--always-on-monthly-usd",
        type=float,
        default=None,
        help="what the always-on GPU box costs per month (default: 730 h x the on-demand price of the most "
        "used instance type, from the runs' cost.on_demand_usd_per_hour tag)",
    )
    cost.add_argument("--out", type=Path, default=Path("outputs/cost-report"), help="for .md and .png")
    cost.add_argument(
        "--mlflow-server-of",
        default="",
        metavar="OWNER/NAME",
        help="add this repository's team MLflow server (mlflow-server up) to the CPU side, priced from its stack "
        "(AWS credentials that may describe it; region and project from --settings)",
    )


def _cost_report(args: argparse.Namespace) -> int:
    """The report on stdout (it is this command's output, not a log line), also written with its chart; exit 2
    with one line when MLflow, --settings or --mlflow-server-of is refused."""
    from gpu_runner.cost.report import CostReportError

    try:
        return _report(args)
    except (CostReportError, RunnerError) as error:  # RunnerError: --settings or --mlflow-server-of
        print(f"error: {error}", file=sys.stderr)
        return 2


def _report(args: argparse.Namespace) -> int:
    from gpu_runner.cost import chart, files, report

    experiments = args.experiment or [report.experiment_from_config(args.config)]
    cpu_usd, cpu_basis = args.cpu_monthly_usd, "--cpu-monthly-usd"
    if args.mlflow_server_of:
        server = _mlflow_server_cost(args)
        if server is not None:
            cpu_usd, cpu_basis = cpu_usd + server.monthly_usd, f"{cpu_basis} + {server.basis}"
    figures = report.cost_report(
        experiments,
        args.days,
        cpu_monthly_usd=cpu_usd,
        cpu_basis=cpu_basis,
        always_on_monthly_usd=args.always_on_monthly_usd,
    )
    markdown, png = files.write_report(figures, args.out)
    print(markdown.read_text(encoding="utf-8"))
    print(f"written: {markdown}" + (f"\nwritten: {png}" if png else ""))
    if png is None:
        print(f"warning: chart not drawn: {chart.PLOT_EXTRA_MISSING}", file=sys.stderr)
    return 0


def _mlflow_server_cost(args: argparse.Namespace) -> Any:
    """The team server's monthly cost, or None (with a warning) when its stack cannot be read."""
    from gpu_runner.cost import server

    if not REPOSITORY.fullmatch(args.mlflow_server_of):
        raise RunnerError(
            f"--mlflow-server-of: '{args.mlflow_server_of}' is not owner/name (e.g. your-org/ml-project)"
        )
    settings = load_settings(args.settings)
    name = server_stack_name(settings.project, args.mlflow_server_of)
    aws = Aws()
    parameters = server.deployed_server_parameters(aws.client("cloudformation", settings.region), name)
    if parameters is None:
        print(f"warning: no team MLflow server stack {name} readable in {settings.region}: CPU side without it",
              file=sys.stderr)  # fmt: skip
        return None
    return server.server_cost(aws, parameters, settings.region)
