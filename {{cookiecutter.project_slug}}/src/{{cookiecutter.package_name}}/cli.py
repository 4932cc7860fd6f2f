"""Command line: `python -m <package> train --config configs/train.yaml`, `check-config`, `gpu-preflight`,
`env-check`, `promote`, `predict`, `sweep plan|trial|collect|local|check` (the cost report is the runner's: `gpu-runner cost-report`)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

from gpu_job import env_check, gpu_preflight, job_contract

from .config import Config, ConfigError, config_from_dict, load_config
from .errors import (
    EXIT_INTERRUPTED,
    EXIT_NO_GPU,
    DataError,
    DistributedError,
    ExportError,
    JobInputError,
    NoGpuError,
    StudyStorageError,
    SweepConfigError,
    TrainingInterrupted,
)

# predict_model.EXPORT_FILES' names (tests/test_predict_registry.py holds them equal), and auto.
PREDICT_EXPORTS = ("auto", "saved_model", "tflite", "tflite_int8")


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
        help="measure a run's model and the champion on the held-out set; serve the run's if strictly better "
        "(promote.yml only)",
    )
    promote.add_argument("--run-id", required=True, help="the MLflow run id (32 hex) of the candidate")
    promote.add_argument("--config", type=Path, default=Path("configs/train.yaml"), help="YAML config file")
    check = commands.add_parser("check-config", help="validate a config file and print it resolved")
    check.add_argument("--config", type=Path, default=Path("configs/train.yaml"))
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
    preflight.add_argument("--lock", type=Path, default=Path("uv.lock"), help="the uv.lock to compare with")
    parity = commands.add_parser(
        "env-check",
        help="print Python, TensorFlow (and its CUDA/cuDNN build), Keras, NumPy, protobuf against uv.lock; "
        "exit 2 when Python or TensorFlow's minor version differs",
    )
    parity.add_argument("--lock", type=Path, default=Path("uv.lock"), help="the uv.lock to compare with")
    predict = commands.add_parser(
        "predict", help="predict a folder of images (or the digits) with an export into Parquet shards"
    )
    _predict_arguments(predict)
    _sweep_parser(commands)
    return parser


def _predict_arguments(parser: argparse.ArgumentParser) -> None:
    """predict's options; here, not in predict_command, which imports MLflow (`--help` must not)."""
    parser.add_argument(
        "--model",
        default="outputs/model.tflite",
        help="a SavedModel folder or .tflite file, or a registry alias (champion) or version (3) of "
        "registry.model_name, or models:/<name>@<alias> or models:/<name>/<version>",
    )
    parser.add_argument(
        "--input", default="digits", help="a folder of images, s3://<bucket>/<prefix>/, or 'digits' (default)"
    )
    parser.add_argument(
        "--output",
        default="outputs/predictions",
        help="the shards' folder or s3://<bucket>/predictions/<batch>/",
    )
    parser.add_argument(
        "--export",
        choices=PREDICT_EXPORTS,
        default="auto",
        help="which of a registry version's exports runs (auto: SavedModel on gpu; TFLite, then int8, on cpu)",
    )
    parser.add_argument(
        "--device", choices=("cpu", "gpu"), default="cpu", help="where the batch runs (for auto)"
    )
    parser.add_argument("--config", type=Path, default=Path("configs/train.yaml"), help="the registry's name")
    parser.add_argument(
        "--check", action="store_true", help="check input, output and model only; predict nothing"
    )
    parser.add_argument("--shard-size", type=_positive, default=512, help="images per Parquet shard")
    parser.add_argument("--batch-size", type=_positive, default=256, help="images per model call")


def _sweep_parser(commands: argparse._SubParsersAction) -> None:
    sweep = commands.add_parser(
        "sweep", help="hyperparameter search (configs/sweep.yaml): sweep.yml's jobs, or local"
    )
    actions = sweep.add_subparsers(dest="action", required=True)

    def action(name: str, text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=text)
        sub.add_argument("--sweep", type=Path, default=Path("configs/sweep.yaml"), help="sweep config file")
        sub.add_argument(
            "--config", type=Path, default=Path("configs/train.yaml"), help="the base training config"
        )
        sub.add_argument(
            "--storage-root",
            default="outputs/sweeps",
            help="where studies live: s3://<bucket>/sweeps in sweep.yml, a local folder otherwise",
        )
        return sub

    check = action("check", "validate the sweep config against the training config and print it")
    check.add_argument(
        "--max-attempts",
        type=_positive,
        default=None,
        help="the GPU runner's max_attempts (configs/gpu-runner.yaml): budget.max_attempts_per_trial must fit",
    )
    action("local", "run every wave here on the CPU, trials one after another (make sweep)")
    plan = action("plan", "plan the next wave: resume left-over trials, ask new ones (sweep.yml's plan job)")
    plan.add_argument(
        "--runners", type=_positive, required=True, help="GPU runners the vCPU quota allows now"
    )
    plan.add_argument("--wave", type=_positive, default=None, help="the wave expected (a dispatch's input)")
    trial = action("trial", "train one trial as a child run (sweep.yml's train job, on the GPU runner)")
    which = trial.add_mutually_exclusive_group(required=True)
    which.add_argument("--trial", type=_non_negative, help="the trial number from the matrix")
    which.add_argument(
        "--trials",
        help="the wave's trial numbers (3,5,8) on the batch backend: AWS_BATCH_JOB_ARRAY_INDEX picks this child's",
    )
    trial.add_argument("--checkpoint-root", default="", help="s3://<bucket>/checkpoints ('' = local disk)")
    collect = action("collect", "tell the parent run the wave's results; say if another wave starts")
    collect.add_argument("--wave", type=_positive, required=True, help="the wave that just ended")


def _number(text: str, low: int) -> int:
    if not re.fullmatch(r"[0-9]{1,6}", text) or int(text) < low:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {low}")
    return int(text)


def _positive(text: str) -> int:
    return _number(text, 1)


def _non_negative(text: str) -> int:
    return _number(text, 0)


def _trial_number(args: argparse.Namespace) -> int:
    """--trial, or this Batch array child's trial of --trials (gpu_job.sweep_array)."""
    if args.trials is None:
        return args.trial
    from gpu_job.sweep_array import parse_trials, trial_of_child

    return trial_of_child(parse_trials(args.trials), os.environ)


def _sweep(args: argparse.Namespace) -> int:
    """The sweep's commands (the platform's gpu_job.sweep); TensorFlow loads only when a trial trains."""
    from gpu_job.sweep import space

    from .sweep_project import SEARCH_RULES, sweep_project

    base = load_config(args.config)
    cfg = space.load_sweep_config(args.sweep, base, SEARCH_RULES)
    if args.action == "check":
        if args.max_attempts is not None:
            space.check_runner_attempts(cfg, args.max_attempts, str(args.sweep))
        job_contract.write_step_output(job_contract.SWEEP_PARALLEL_OUTPUT, str(cfg.parallel))
        print(cfg.model_dump_json(indent=2))
        return 0
    from gpu_job.sweep import commands

    commands.route_optuna_logs()
    project = sweep_project(base)
    if args.action == "local":
        commands.local(cfg, project, args.storage_root)
        return 0
    if args.action == "plan":
        commands.plan(cfg, project, args.storage_root, args.runners, args.wave)
        return 0
    if args.action == "trial":
        return commands.trial(cfg, project, args.storage_root, _trial_number(args), args.checkpoint_root)
    commands.collect(cfg, project, args.storage_root, args.wave)
    return 0


def _env_check(lock: Path) -> int:
    """The parity table on stdout and in the job summary; 2 with the fix when the stack is not the locked one."""
    parity = env_check.check(lock)
    print(parity.table())
    verdict = "failed" if parity.failed else "the locked stack"
    job_contract.append_job_summary(f"### Environment check: {verdict}\n\n{parity.table()}\n")
    if parity.failed:
        print(f"error: {parity.error()}", file=sys.stderr)
        job_contract.append_job_summary(f"\n{parity.error()}\n")
        return 2
    return 0


def _gpu_preflight(args: argparse.Namespace) -> int:
    allow_cpu = gpu_preflight.parse_flag(args.allow_cpu) or load_config(args.config).training.allow_cpu
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # First the stack, then the GPU: an image with another TensorFlow fails here, in the same seconds.
    if _env_check(args.lock):
        return 2
    report = gpu_preflight.probe(
        image=os.environ.get(job_contract.GPU_RUNTIME_IMAGE, ""), allow_cpu=allow_cpu
    )
    job_contract.write_step_output(job_contract.GPU_PREFLIGHT_OUTPUT, report.result)
    job_contract.append_job_summary(gpu_preflight.summary(report))
    if report.gpu_ok:
        print(gpu_preflight.summary(report).splitlines()[-1])
        return 0
    print(f"{'warning' if allow_cpu else 'error'}: {gpu_preflight.message(report)}", file=sys.stderr)
    return 0 if allow_cpu else EXIT_NO_GPU


def _promote(args: argparse.Namespace) -> int:
    """0 when the alias moved or the champion stays (its line says which), 1 when nothing could be decided."""
    # A workflow input: checked before it reaches MLflow.
    if not re.fullmatch(r"[0-9a-f]{32}", args.run_id):
        print(
            f"error: --run-id: {args.run_id!r} is not an MLflow run id (32 hex characters)", file=sys.stderr
        )
        return 2
    # Imported here, not at the top: MLflow and TensorFlow take seconds to import (13 s on a loaded 2-core
    # machine), which `check-config` and the GPU preflight (its step must end within 30 s) must not pay for.
    from gpu_job import tracking
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from . import promote

    cfg = load_config(args.config)
    uri = tracking.tracking_uri()
    with tempfile.TemporaryDirectory(prefix="promote-") as scratch:
        try:
            promotion = promote.promote(MlflowClient(uri), cfg, args.run_id, Path(scratch))
        except promote.PromoteError as error:
            print(f"error: {error}", file=sys.stderr)
            job_contract.append_job_summary(f"### Champion model: nothing promoted\n\n{error}\n")
            return 1
        except MlflowException as error:
            print(
                f"error: the tracking server refused promote ({error.message[:300]}); its MLflow user needs READ "
                "on the training experiments and EDIT on the served model and its promotions experiment "
                "(manual/mlflow-server.md)",
                file=sys.stderr,
            )
            return 1
    print(promotion.decision.line())
    job_contract.append_job_summary(promote.job_summary(uri, promotion))
    return 0


def _predict(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from . import predict_command  # MLflow (and TensorFlow unless --check): see _train

    return predict_command.run(args)


def _train(cfg: Config, config_path: Path) -> int:
    """0 when the training finished; EXIT_INTERRUPTED when a spot notice stopped it (the stop job resumes it)."""
    # The one command that needs TensorFlow, imported here and not at the top: TensorFlow and MLflow take
    # seconds to import, which `--help`, `check-config` and the GPU preflight must not pay for
    # (tests/test_import_graph.py checks that importing this module loads neither).
    from . import train as training

    try:
        training.train(cfg, config_path)
    except TrainingInterrupted as stopped:
        print(f"interrupted: {stopped}", file=sys.stderr)
        job_contract.append_job_summary(
            f"### Training interrupted\n\n{stopped}. The checkpoint is in S3; the stop job starts the next "
            "attempt, which resumes this MLflow run.\n"
        )
        return EXIT_INTERRUPTED
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("train", "gpu-preflight"):
        try:
            job_contract.check(args.config, os.environ)
        except (ConfigError, JobInputError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "sweep":
        try:
            if args.action == "trial":  # the one sweep command that runs on the GPU runner
                job_contract.check(args.config, os.environ)
                job_contract.check(args.sweep, os.environ, flag="--sweep")
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
            return _sweep(args)
        except (
            ConfigError,
            JobInputError,
            SweepConfigError,
            DataError,
            ExportError,
            StudyStorageError,
        ) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "promote":
        try:
            return _promote(args)
        except (ConfigError, DataError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "predict":
        try:
            return _predict(args)
        except (ConfigError, DataError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "env-check":
        try:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
            return _env_check(args.lock)
        except ValueError as error:
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
        return _train(cfg, args.config)
    except (ConfigError, DataError, DistributedError, ExportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except NoGpuError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_NO_GPU


if __name__ == "__main__":
    sys.exit(main())
