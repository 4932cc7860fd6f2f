"""Command line: `python -m <package> train --config configs/train.yaml`, `check-config`, `cost-report`,
`gpu-preflight`, `promote`."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from . import workflow_contract
from .config import ConfigError, config_from_dict, load_config
from .errors import EXIT_INTERRUPTED, EXIT_NO_GPU, DataError, ExportError, NoGpuError, TrainingInterrupted


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=__package__, description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train, evaluate, export and log one MLflow run")
    train.add_argument("--config", type=Path, default=Path("configs/train.yaml"), help="YAML config file")
    train.add_argument(
        "--checkpoint-uri",
        default=None,
        help="s3://bucket/prefix for resumable checkpoints (overrides training.checkpoint_uri; '' = local only)",
    )
    promote = commands.add_parser(
        "promote",
        help="move registry.alias to the version a run registered, if it beats the holder (promote.yml only)",
    )
    promote.add_argument("--run-id", required=True, help="the MLflow run id (32 hex) of the candidate")
    promote.add_argument("--config", type=Path, default=Path("configs/train.yaml"), help="YAML config file")
    check = commands.add_parser("check-config", help="validate a config file and print it resolved")
    check.add_argument("--config", type=Path, default=Path("configs/train.yaml"))
    cost = commands.add_parser(
        "cost-report",
        help="GPU hours, billed cost, overhead and spot share of the last N days vs an always-on GPU box",
    )
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
    preflight = commands.add_parser(
        "gpu-preflight",
        help=f"fail fast (exit {EXIT_NO_GPU}) unless TensorFlow lists a GPU and runs a matmul on it",
    )
    preflight.add_argument(
        "--config", type=Path, default=Path("configs/train.yaml"), help="for training.allow_cpu"
    )
    preflight.add_argument(
        "--allow-cpu",
        default="",
        help="the workflow's allow-cpu dispatch input: true lets a GPU runner train on its CPU (debugging)",
    )
    return parser


def _gpu_preflight(args: argparse.Namespace) -> int:
    # Imported here: it imports TensorFlow, which the other commands' --help must not pay for.
    # Not .tracking: importing MLflow costs seconds of the preflight's 25 s budget on a busy machine.
    from . import gpu_preflight

    allow_cpu = gpu_preflight.parse_flag(args.allow_cpu) or load_config(args.config).training.allow_cpu
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    report = gpu_preflight.probe(
        image=os.environ.get(workflow_contract.GPU_RUNTIME_IMAGE, ""), allow_cpu=allow_cpu
    )
    workflow_contract.write_step_output(workflow_contract.GPU_PREFLIGHT_OUTPUT, report.result)
    workflow_contract.append_job_summary(gpu_preflight.summary(report))
    if report.gpu_ok:
        print(gpu_preflight.summary(report).splitlines()[-1])
        return 0
    print(f"{'warning' if allow_cpu else 'error'}: {gpu_preflight.message(report)}", file=sys.stderr)
    return 0 if allow_cpu else EXIT_NO_GPU


def _cost_report(args: argparse.Namespace) -> int:
    # Imported here: the report needs MLflow and matplotlib, never TensorFlow.
    from .cost_report import cost_report, write_report

    experiments = args.experiment or [load_config(args.config).tracking.experiment_name]
    report = cost_report(
        experiments,
        args.days,
        cpu_monthly_usd=args.cpu_monthly_usd,
        always_on_monthly_usd=args.always_on_monthly_usd,
    )
    markdown, chart = write_report(report, args.out)
    print(markdown.read_text(encoding="utf-8"))
    print(f"written: {markdown}\nwritten: {chart}")
    return 0


def _promote(args: argparse.Namespace) -> int:
    """0 when the alias moved or the holder stays (its line says which), 1 when nothing could be decided."""
    # A workflow input: checked before it reaches MLflow's search filter.
    if not re.fullmatch(r"[0-9a-f]{32}", args.run_id):
        print(
            f"error: --run-id: {args.run_id!r} is not an MLflow run id (32 hex characters)", file=sys.stderr
        )
        return 2
    from mlflow.tracking import MlflowClient

    from . import registry, tracking

    cfg = load_config(args.config)
    client = MlflowClient(tracking.tracking_uri())
    decision = registry.promote(client, cfg.registry, args.run_id)
    if decision.version is not None:
        registry.log_decision(client, args.run_id, decision)
    print(decision.line())
    workflow_contract.append_job_summary(registry.job_summary(tracking.tracking_uri(), decision))
    return 1 if decision.outcome.startswith("skipped") else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("train", "gpu-preflight"):
        from .workflow_contract import check

        try:
            check(args.config, os.environ)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "promote":
        try:
            return _promote(args)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "cost-report":
        from .cost_report import CostReportError

        try:
            return _cost_report(args)
        except (ConfigError, CostReportError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "gpu-preflight":
        try:
            return _gpu_preflight(args)
        except (ConfigError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    try:
        cfg = load_config(args.config)
        if getattr(args, "checkpoint_uri", None) is not None:
            raw = cfg.model_dump(mode="json")
            raw["training"]["checkpoint_uri"] = args.checkpoint_uri
            cfg = config_from_dict(raw, f"{args.config} with --checkpoint-uri")
        if args.command == "check-config":
            print(cfg.model_dump_json(indent=2))
            return 0
        # TF's C++ INFO lines drown the Keras progress bars; warnings and errors still show.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        # Imported here so `--help` and `check-config` do not pay for importing TensorFlow.
        from .train import train

        train(cfg, args.config)
    except (ConfigError, DataError, ExportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except NoGpuError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_NO_GPU
    except TrainingInterrupted as stopped:
        print(f"interrupted: {stopped}", file=sys.stderr)
        workflow_contract.append_job_summary(
            f"### Training interrupted\n\n{stopped}. The checkpoint is in S3; the stop job starts the next "
            "attempt, which resumes this MLflow run.\n"
        )
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
