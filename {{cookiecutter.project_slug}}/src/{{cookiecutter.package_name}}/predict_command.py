"""`python -m <package> predict`: check the input, the output and the model, then predict and log the batch.

Everything a batch can fail on before its first image (an empty prefix, an output it may not write, an alias or
version that does not exist or whose files are not the ones promote recorded, an export the version's run did not
keep) is checked first, without TensorFlow: `--check` stops there, which is what predict.yml's CPU job runs before
any GPU is launched.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpu_job import batch_io, job_contract, tracking
from mlflow.tracking import MlflowClient

from . import predict_model
from .config import load_config
from .data import list_inputs
from .predict_model import RegistryModel


@dataclass(frozen=True)
class Checked:
    """What the checks found: the listing (reused by the batch), the model, the export that will run and the
    experiment the inference run goes to (the config, read once)."""

    keys: list[str]
    registry: RegistryModel | None
    export: str
    training_experiment: str


def check(args: argparse.Namespace) -> Checked:
    """The inputs and the output first (a bad one is named before the registry is asked), then the model.
    --shard-size and --batch-size are positive already (cli._positive)."""
    keys = list_inputs(args.input)
    batch_io.check_writable(args.output)
    spec = predict_model.registry_spec(args.model)
    if spec is None:
        from .predict import check_model_files  # on disk: no registry, no download

        check_model_files(Path(args.model))  # before the config: a missing model is the message to see
    cfg = load_config(args.config)
    if spec is None:
        return Checked(keys, None, _local_export(Path(args.model)), cfg.tracking.experiment_name)
    name, alias, version = spec
    client = MlflowClient(tracking.tracking_uri())
    registry = predict_model.resolve(client, name or cfg.registry.model_name, alias, version)
    with tempfile.TemporaryDirectory(prefix="predict-manifest-") as scratch:
        recorded = predict_model.recorded_files(registry, Path(scratch))
    export = predict_model.pick_export(client, registry, recorded, args.export, args.device)
    return Checked(keys, registry, export, cfg.tracking.experiment_name)


def _local_export(path: Path) -> str:
    by_file = {file: name for name, file in predict_model.EXPORT_FILES.items()}
    return by_file.get(path.name, "saved_model" if path.is_dir() else "tflite")


def run(args: argparse.Namespace) -> int:
    checked = check(args)
    if args.check and checked.registry is not None:
        # The files the next job will load, checked now too: a changed file stops the batch here, before a GPU
        # is launched and before the job outputs name a model (that job checks them again before loading).
        with tempfile.TemporaryDirectory(prefix="predict-check-") as scratch:
            predict_model.download(checked.registry, checked.export, Path(scratch))
    model_ref = checked.registry.uri if checked.registry else args.model
    print(
        f"input {args.input}: {len(checked.keys)} images; output {args.output}: writable; model {model_ref}"
        + (f" (run {checked.registry.run_id})" if checked.registry else "")
        + f", export {checked.export}"
    )
    # The pinned model for the job that predicts: a version, so an alias moved meanwhile changes nothing.
    job_contract.write_step_output(job_contract.PREDICT_MODEL_OUTPUT, model_ref)
    job_contract.write_step_output(job_contract.PREDICT_EXPORT_OUTPUT, checked.export)
    job_contract.write_step_output(job_contract.PREDICT_IMAGES_OUTPUT, str(len(checked.keys)))
    if args.check:
        return 0
    return _predict(args, checked)


def _predict(args: argparse.Namespace, checked: Checked) -> int:
    with tempfile.TemporaryDirectory(prefix="predict-model-") as scratch:
        # A registry model's files are checked against what promote recorded before TensorFlow is even imported.
        path = (
            predict_model.download(checked.registry, checked.export, Path(scratch))
            if checked.registry is not None
            else Path(args.model)
        )
        from gpu_job import batch_tracking  # PyArrow, with the engine: not for --check

        from . import predict  # TensorFlow: see cli._train

        batch = batch_tracking.Batch(
            args.input, args.output, args.device, checked.export, args.shard_size, args.batch_size
        )
        model = predict.load_model(path, checked.registry.label if checked.registry else None)
        with batch_tracking.inference_run(
            checked.training_experiment, batch, model.version, checked.registry
        ) as run:
            summary = predict.run(
                model,
                args.input,
                args.output,
                args.shard_size,
                args.batch_size,
                progress=None,
                keys=checked.keys,
            )
            batch_tracking.log_summary(summary)
    uri = tracking.tracking_uri()
    job_contract.append_job_summary(
        batch_tracking.job_summary(uri, run.experiment_id, run.run_id, batch, model.version, summary)
    )
    print(
        f"{summary.predicted} of {summary.images} images predicted into {args.output} ({summary.shards} shards, "
        f"{summary.shards_done_before} kept from an earlier run); mean confidence {summary.mean_confidence:.3f}"
    )
    print("classes: " + ", ".join(f"{name}={count}" for name, count in summary.class_counts.items()))
    for key, reason in summary.skipped.items():
        print(f"skipped {key}: {reason}")
    print(f"MLflow run: {tracking.run_link(uri, run.experiment_id, run.run_id)}")
    return 0
