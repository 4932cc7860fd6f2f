"""Command line: `python -m <package> train --config configs/train.yaml`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .config import ConfigError, config_from_dict, load_config
from .errors import EXIT_INTERRUPTED, DataError, ExportError, TrainingInterrupted


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
    check = commands.add_parser("check-config", help="validate a config file and print it resolved")
    check.add_argument("--config", type=Path, default=Path("configs/train.yaml"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
    except TrainingInterrupted as stopped:
        print(f"interrupted: {stopped}", file=sys.stderr)
        from .tracking import append_job_summary  # TensorFlow is loaded by now

        append_job_summary(
            f"### Training interrupted\n\n{stopped}. The checkpoint is in S3; the stop job starts the next "
            "attempt, which resumes this MLflow run.\n"
        )
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
