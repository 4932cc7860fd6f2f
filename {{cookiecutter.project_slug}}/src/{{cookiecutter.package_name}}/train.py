"""The training job: data -> model -> fit -> evaluate -> export, every step recorded in one MLflow run."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import tensorflow as tf
import yaml
from gpu_job import checkpoints, distributed, gpu_preflight, interruption, job_contract, registry, tracking
from gpu_job.train_hooks import TrainHooks

from . import (
    data,
    evaluate,
    export,
    pruning,
    runtime,
)
from .callbacks import EpochHook, MlflowEpochLogger, S3CheckpointSync, StopOnInterruption
from .config import Config
from .errors import DistributedError, TrainingInterrupted
from .model import build_model
from .pipeline import make_dataset, shard_by_element


@dataclass(frozen=True)
class TrainResult:
    run_id: str
    experiment_id: str
    tracking_uri: str
    metrics: dict[str, float]
    epochs_run: int
    champion: registry.ChampionDecision | None = None
    # The LoggedModel of the run (tracking.log_model).
    model_id: str | None = None


def _callbacks(
    cfg: Config,
    s3_sync: S3CheckpointSync | None,
    watcher: interruption.InterruptionWatcher | None,
    extra: Sequence[tf.keras.callbacks.Callback] = (),
    log_epochs: bool = True,
) -> list[tf.keras.callbacks.Callback]:
    prune = cfg.pruning.enabled
    backup = tf.keras.callbacks.BackupAndRestore(
        backup_dir=str(cfg.training.checkpoint_dir), save_freq=cfg.training.checkpoint_every
    )
    stop = None
    if watcher is not None:
        stop = StopOnInterruption(
            watcher,
            s3_sync.push_if_new if s3_sync else lambda _batch: None,
            backup,
            cfg.training.checkpoint_every,
            initial_epochs=s3_sync.epochs_done if s3_sync else 0,
        )
    # Order matters: the S3 sync pushes what BackupAndRestore has just written; the interruption check comes
    # after both.
    return [
        # Resumes an interrupted fit() from the last backup; deleted locally once training completes. In a
        # multi-worker training every worker has one: Keras writes the chief's to backup_dir/chief and the
        # others' to a temporary backup_dir/workertemp_<index> (keras/src/distribute/worker_training_state.py).
        backup,
        # After the restore: the wrappers' pruning step then continues from the backup's value.
        *(pruning.callbacks() if prune else []),
        # Before the S3 push: an epoch is in MLflow before its checkpoint is, so a resume never skips logging
        # one (at worst an epoch is logged twice, the re-run's value last).
        *([MlflowEpochLogger()] if log_epochs else []),
        *([s3_sync] if s3_sync else []),
        *([stop] if stop else []),
        # A caller's (a sweep trial's pruner and time budget: TrainHooks.on_epoch, through EpochHook): after the
        # epoch is logged and backed up.
        *extra,
        tf.keras.callbacks.EarlyStopping(
            monitor="val_loss",
            patience=cfg.training.early_stopping_patience,
            restore_best_weights=True,
            # While the schedule prunes, val_loss gets worse by design: neither stop then nor restore the
            # weights of an epoch that was not yet at final_sparsity.
            start_from_epoch=cfg.pruning.end_epoch if prune else 0,
        ),
    ]


def _gpu_tags_here(allow_cpu: bool) -> dict[str, str]:
    """tracking.gpu_tags for this process (TensorFlow's GPUs and build, the driver through NVML or nvidia-smi)."""
    boundary = gpu_preflight.TfBoundary()
    return tracking.gpu_tags(
        len(boundary.list_gpus()), boundary.build_info(), gpu_preflight.find_driver(), allow_cpu
    )


def _checkpoint_store(cfg: Config, scope: str = "") -> checkpoints.S3Checkpoints | None:
    """This training's checkpoints in S3 (None: local disk only): written under this AWS session's own prefix,
    restored from it or from an earlier attempt's of the same branch and commit (checkpoints.open_store)."""
    if not cfg.training.checkpoint_uri:
        return None
    tags = tracking.run_tags()
    return checkpoints.open_store(
        cfg.training.checkpoint_uri,
        tags.get("git.branch", ""),
        tags.get("git.commit", ""),
        checkpoints.config_hash(cfg.trajectory()),
        cfg.training.checkpoint_dir,
        scope=scope,
    )


# What fit() names its per-epoch logs when compiled with metrics=["accuracy"] and given validation data (_fit).
EPOCH_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")


def _full_history(run_id: str, this_attempt: dict[str, list[float]]) -> dict[str, list[float]]:
    """fit() of a resumed attempt only returns its own epochs; the run holds them all. An attempt resumed after
    the last epoch (the previous one died while it evaluated or exported) trains none and returns {}."""
    client = mlflow.MlflowClient()
    full = {}
    for name in this_attempt or EPOCH_METRICS:
        points = sorted(client.get_metric_history(run_id, name), key=lambda m: (m.step, m.timestamp))
        full[name] = list({m.step: m.value for m in points}.values())
    return full


def _fit(
    cfg: Config,
    splits: data.Splits,
    plan: runtime.RuntimePlan,
    strategy: tf.distribute.Strategy,
    s3_sync: S3CheckpointSync | None,
    watcher: interruption.InterruptionWatcher | None,
    extra: Sequence[tf.keras.callbacks.Callback] = (),
    log_epochs: bool = True,
):
    t = cfg.training
    # Multi-worker: a dataset is batched with the global batch and each worker gets batch_size of it, so every
    # worker trains with the configured batch (the tutorial's GLOBAL_BATCH_SIZE = 64 * NUM_WORKERS).
    batch = t.batch_size * plan.workers
    train_ds = make_dataset(
        splits.x_train,
        splits.y_train,
        batch,
        training=True,
        seed=t.seed,
        shuffle_buffer=t.shuffle_buffer,
    )
    val_ds = make_dataset(splits.x_val, splits.y_val, batch, training=False, seed=t.seed)
    if plan.workers > 1:
        train_ds, val_ds = shard_by_element(train_ds), shard_by_element(val_ds)
    with strategy.scope():
        model = build_model(splits.input_shape, splits.num_classes, cfg.model)
        if cfg.pruning.enabled:
            model = pruning.wrap(
                model, cfg.pruning, pruning.steps_per_epoch(len(splits.y_train), t.batch_size)
            )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(t.learning_rate),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=plan.xla,
        )
    history = model.fit(
        train_ds,
        validation_data=val_ds,
        epochs=t.epochs,
        callbacks=_callbacks(cfg, s3_sync, watcher, extra, log_epochs),
        verbose=1,
    )
    if cfg.pruning.enabled:
        # Everything after training (evaluation, exports, the logged model) sees plain layers with the zeros.
        model = pruning.strip(model)
    if plan.workers > 1:
        model = _off_the_cluster(model, splits, cfg, plan)
    return model, history.history


def _off_the_cluster(
    model: tf.keras.Model, splits: data.Splits, cfg: Config, plan: runtime.RuntimePlan
) -> tf.keras.Model:
    """The trained model as a plain one of this process, for the chief's evaluation, exports and logged model.

    Every worker calls this at the same point. Reading the weights is a collective: batch normalisation's moving
    statistics are ON_READ variables, one value per worker, averaged across workers when read ("saving of model
    or model's related information may require SyncOnRead variables to be read, which needs the cooperation of
    all workers to perform all-reduce": keras/src/distribute/distributed_file_utils.py, Keras 2.15). This is
    why TensorFlow's tutorial has every worker save, the non-chief ones into temporary directories
    (https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras#model_saving_and_loading). Here
    the workers read the weights together once; after that the chief predicts and saves a model outside the
    strategy, which needs nobody else, and the other workers write nothing."""
    weights = model.get_weights()
    local = build_model(splits.input_shape, splits.num_classes, cfg.model)
    local.set_weights(weights)
    # Compiled as in _fit (a fresh optimizer): the logged Keras model loads back the same way as a single
    # worker's.
    local.compile(
        optimizer=tf.keras.optimizers.Adam(cfg.training.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=plan.xla,
    )
    return local


def _wait_for_every_worker(strategy: tf.distribute.Strategy) -> None:
    """A sum over all workers, so it returns once every worker has called it: the chief after its run is complete,
    the others after training. Without it a worker leaves while the chief still evaluates and exports, and the
    chief's coordination service marks it failed ("Task /job:worker/replica:0/task:1 heartbeat timeout", then
    "BaseCollectiveExecutor::StartAbort": measured with TF 2.15 on CPU, tests/test_distributed.py). A worker whose
    chief failed after training fails too: the chief's exit aborts the sum ("Collective ops is aborted by: Socket
    closed", exit 1 a second later, measured); on AWS Batch the main node's exit ends the job anyway."""
    strategy.reduce(
        tf.distribute.ReduceOp.SUM, strategy.run(tf.function(lambda: tf.constant(1.0))), axis=None
    )


def _evaluate_and_log(cfg: Config, model: tf.keras.Model, splits: data.Splits, history: dict, out: Path):
    probabilities = model.predict(
        make_dataset(splits.x_test, splits.y_test, cfg.training.batch_size, training=False, seed=0), verbose=0
    )
    keras_pred = np.argmax(probabilities, axis=-1)
    result = evaluate.evaluate(splits.y_test, keras_pred, splits.class_names)
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    mlflow.log_artifact(
        str(evaluate.plot_confusion_matrix(result, splits.class_names, plots / "confusion_matrix.png")),
        "plots",
    )
    mlflow.log_artifact(str(evaluate.plot_learning_curves(history, plots / "learning_curves.png")), "plots")
    mlflow.log_dict(result.report, "evaluation/classification_report.json")
    mlflow.log_text(result.report_text, "evaluation/classification_report.txt")
    mlflow.log_metrics(result.metrics())
    return result, keras_pred


def _export_and_log(
    cfg: Config, model: tf.keras.Model, splits: data.Splits, keras_pred: np.ndarray, out: Path
) -> tuple[dict[str, float], str | None]:
    """Exports, their checks and figures, and the MLflow model; returns the figures and the logged model's id."""
    saved_model = export.export_saved_model(model, out / "saved_model")
    mlflow.log_artifacts(str(saved_model), "exports/saved_model")
    class_names = out / export.CLASS_NAMES_FILE
    class_names.write_text(json.dumps(list(splits.class_names)), encoding="utf-8")
    mlflow.log_artifact(str(class_names), "exports")
    measured = [
        _measure(cfg, "saved_model", saved_model, export.SavedModelPredictor(saved_model), splits, keras_pred)
    ]
    tflite = {
        "tflite": (cfg.export.tflite, None),
        "tflite_int8": (cfg.export.tflite_int8, _representative(cfg, splits)),
    }
    rejected: dict[str, float] = {}
    for name, (wanted, representative) in tflite.items():
        if not wanted:
            continue
        path = export.export_tflite(saved_model, out / f"model{name[len('tflite') :]}.tflite", representative)
        try:
            measured.append(_measure(cfg, name, path, export.TFLitePredictor(path), splits, keras_pred))
        except export.Disagrees as disagrees:
            # A quantised copy that changes predictions is not kept, but the trained model is: the run (and the
            # GPU minutes it cost) is not lost to one export. The tag and the agreement say why it is missing.
            path.unlink()
            rejected[f"{name}_agreement"] = disagrees.agreement
            mlflow.set_tag(f"export.{name}", f"rejected: {disagrees}")
            print(f"WARNING: {disagrees}; {path.name} is not kept")
            continue
        mlflow.log_artifact(str(path), "exports")
    metrics = {key: value for figures in measured for key, value in figures.metrics().items()}
    if cfg.pruning.enabled:
        # Measured on the SavedModel as written, the file every other export is converted from.
        metrics["export.sparsity"] = pruning.saved_model_sparsity(saved_model)
    mlflow.log_metrics({**metrics, **rejected})
    model_id = None
    if cfg.tracking.log_model:
        model_id = mlflow.tensorflow.log_model(model, name="model", input_example=splits.x_test[:4]).model_id
    return metrics, model_id


def _representative(cfg: Config, splits: data.Splits) -> np.ndarray:
    """The int8 converter's calibration images: the first training images (already shuffled by the split)."""
    return splits.x_train[: cfg.export.representative_samples]


def _measure(
    cfg: Config,
    name: str,
    path: Path,
    predict: Callable[[np.ndarray], np.ndarray],
    splits: data.Splits,
    keras_pred: np.ndarray,
) -> export.Measured:
    """One export held to the agreement rule on the test set (export.Disagrees), with its size and CPU latency."""
    predicted = np.argmax(predict(splits.x_test), axis=-1)
    agreement = export.check_agreement(keras_pred, predicted, cfg.export.tflite_min_agreement, name)
    latency = export.cpu_latency_ms(predict, splits.x_test[0], cfg.export.latency_runs)
    return export.Measured(name, export.size_bytes(path), agreement, latency)


@contextlib.contextmanager
def _watcher(cfg: Config, multi_worker: bool = False) -> Iterator[interruption.InterruptionWatcher | None]:
    if not interruption.should_watch(cfg.training.watch_interruptions):
        yield None
        return
    if multi_worker:
        # One worker that stops on its notice would leave the others waiting in an all-reduce; the job's retry
        # (all nodes again) resumes from the chief's S3 checkpoint instead.
        print("WARNING: spot interruption notices are not watched in multi-worker training")
        yield None
        return
    if not cfg.training.checkpoint_uri:
        print(
            "WARNING: watching for spot interruptions without training.checkpoint_uri: the backup stays on the instance"
        )
    client = interruption.ImdsClient()
    with interruption.InterruptionWatcher(client, cfg.training.interruption_poll_seconds) as watcher:
        yield watcher


def _log_inputs(
    cfg: Config, splits: data.Splits, plan: runtime.RuntimePlan, config_path: Path | None
) -> None:
    mlflow.log_params({**cfg.flat_params(), **plan.describe()})
    mlflow.log_dict(cfg.model_dump(mode="json"), "config/resolved_config.json")
    if config_path is not None:
        mlflow.log_artifact(str(config_path), "config")
    mlflow.log_params(
        {
            "data.train_samples": len(splits.y_train),
            "data.classes": splits.num_classes,
            "data.input_shape": "x".join(map(str, splits.input_shape)),
        }
    )
    if cfg.pruning.enabled:
        per_epoch = pruning.steps_per_epoch(len(splits.y_train), cfg.training.batch_size)
        mlflow.log_params(pruning.schedule(cfg.pruning, per_epoch).params())
    if plan.workers > 1:
        mlflow.log_param("runtime.global_batch_size", cfg.training.batch_size * plan.workers)


def _attempt_tags(plan: runtime.RuntimePlan) -> dict[str, str]:
    return {f"resumed.{key}": str(value) for key, value in plan.describe().items()}


def _champion(
    cfg: Config, run_id: str, metrics: dict[str, float], hooks: TrainHooks
) -> registry.ChampionDecision:
    """Compare the run with the champion (read-only: training registers nothing); the decision is logged on the
    run either way."""
    client = mlflow.MlflowClient()
    if not hooks.decide_champion:
        decision = registry.skipped(cfg.registry, hooks.skip_reason or "the caller decides")
    elif not cfg.registry.enabled:
        decision = registry.skipped(cfg.registry, "registry.enabled is false")
    else:
        decision = registry.decide(client, cfg.registry, run_id, metrics)
    registry.log_decision(client, run_id, decision)
    print(decision.line())
    return decision


def _multi_worker_cluster(cfg: Config) -> distributed.Cluster | None:
    """The cluster of a multi-worker training (TF_CONFIG, or an AWS Batch multi-node job), checked against the
    config; None trains on this machine alone."""
    cluster = distributed.cluster_from_env()
    if cluster is None:
        return None
    if cfg.pruning.enabled:
        raise DistributedError(
            "pruning.enabled is true, and pruning is not supported in multi-worker training yet (its schedule "
            "counts one worker's steps): set pruning.enabled: false, or train on one node"
        )
    print(cluster.describe())
    return cluster


def _train_worker(
    cfg: Config, splits: data.Splits, plan: runtime.RuntimePlan, strategy: tf.distribute.Strategy
) -> None:
    """A non-chief worker: the same fit as the chief's, and nothing else. It logs nothing to MLflow and writes
    no exports; its backups go to Keras' temporary worker directory. It restores the chief's S3 checkpoint (read
    only) so that a retried job resumes every worker at the same epoch."""
    store = _checkpoint_store(cfg)
    if store:
        store.restore()
    checkpoints.check_backup_kind(cfg.training.checkpoint_dir, cfg.pruning.enabled)
    _fit(cfg, splits, plan, strategy, None, None, log_epochs=False)
    _wait_for_every_worker(strategy)


def train(
    cfg: Config,
    config_path: Path | None = None,
    hooks: TrainHooks | None = None,
    callbacks: Sequence[tf.keras.callbacks.Callback] = (),
) -> TrainResult | None:
    """Run the whole job; returns where the MLflow run is and its headline metrics (None on a non-chief worker
    of a multi-worker training, which has no run). `hooks`: what a caller adds (a sweep trial's tags, run and
    per-epoch hook); `callbacks`: more Keras callbacks, after the epoch is logged and backed up."""
    hooks = hooks or TrainHooks()
    extra = [*([EpochHook(hooks.on_epoch)] if hooks.on_epoch else []), *callbacks]
    # First, before TensorFlow runs an op: a multi-node job's nodes find each other here (runtime.configure).
    cluster = _multi_worker_cluster(cfg)
    plan, strategy = runtime.configure(pruning.runtime_training(cfg), cluster)
    splits = data.load_splits(cfg.data, cfg.training.seed)
    if cluster is not None and not cluster.is_chief:
        _train_worker(cfg, splits, plan, strategy)
        return None

    uri = tracking.tracking_uri()
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.set_experiment(cfg.tracking.experiment_name)
    if cfg.tracking.log_system_metrics:
        mlflow.set_system_metrics_sampling_interval(cfg.tracking.system_metrics_interval_seconds)
        mlflow.set_system_metrics_samples_before_logging(1)

    out = Path(cfg.export.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = _checkpoint_store(cfg, hooks.checkpoint_scope)
    restored = store.restore() if store else None
    # Before any run opens: a refusal leaves no failed run behind.
    checkpoints.check_backup_kind(cfg.training.checkpoint_dir, cfg.pruning.enabled)
    resume_id = (restored.run_id if restored and restored.run_id else None) or hooks.run_id
    if restored and store:
        print(f"resuming from {restored.source}: {restored.epochs_done} epoch(s) done, run {resume_id}")
    elif resume_id:
        print(f"no checkpoint to resume from: training again from the first epoch in run {resume_id}")
    with mlflow.start_run(
        run_id=resume_id,
        run_name=None if resume_id else (hooks.run_name or cfg.tracking.run_name),
        tags={**tracking.run_tags(), **hooks.tags},
        log_system_metrics=cfg.tracking.log_system_metrics,
    ) as run:
        # At once, also when resumed: the stop job logs this attempt's cost to the run even if training dies.
        job_contract.write_step_output(job_contract.MLFLOW_RUN_ID_OUTPUT, run.info.run_id)
        if hooks.on_run:
            hooks.on_run(run.info.run_id)
        # Per attempt (a resumed attempt may run on other hardware): what this machine really is.
        mlflow.set_tags(_gpu_tags_here(runtime.cpu_allowed(cfg.training)))
        if resume_id:
            # Params are write-once in MLflow and the first attempt logged them; this machine may differ.
            mlflow.set_tags(
                {"resumed.from_epoch": str(restored.epochs_done if restored else 0), **_attempt_tags(plan)}
            )
        if not resume_id or not run.data.params:  # an attempt that died before it logged them
            _log_inputs(cfg, splits, plan, config_path)
        s3_sync = (
            S3CheckpointSync(
                store,
                run.info.run_id,
                restored.epochs_done if restored else 0,
                per_batch=cfg.training.checkpoint_every != "epoch",
            )
            if store
            else None
        )
        if store:
            mlflow.set_tag("checkpoint.uri", store.uri)

        started = time.perf_counter()
        # One value per workflow attempt (step): the stop job compares each with the attempt's billed time.
        attempt = job_contract.attempt()
        with _watcher(cfg, cluster is not None) as watcher:
            try:
                model, history = _fit(cfg, splits, plan, strategy, s3_sync, watcher, extra)
            except TrainingInterrupted as stopped:
                mlflow.log_metric("training_seconds", time.perf_counter() - started, step=attempt)
                # KILLED, not FAILED: the next attempt resumes this run from the checkpoint.
                mlflow.set_tags(
                    {
                        "interrupted.notice": str(stopped.detail),
                        "interrupted.epochs_done": str(stopped.epochs_done),
                    }
                )
                mlflow.end_run("KILLED")
                raise
        mlflow.log_metric("training_seconds", time.perf_counter() - started, step=attempt)
        if resume_id:
            history = _full_history(run.info.run_id, history)

        with tempfile.TemporaryDirectory(dir=out) as scratch:
            result, keras_pred = _evaluate_and_log(cfg, model, splits, history, Path(scratch))
            export_metrics, model_id = _export_and_log(cfg, model, splits, keras_pred, out)

        epochs_run = len(history.get("loss", []))
        headline = {
            **result.metrics(),
            "best_val_accuracy": float(max(history.get("val_accuracy", [0.0]))),
            "best_val_loss": float(min(history.get("val_loss", [float("nan")]))),
            "epochs_run": float(epochs_run),
            **export_metrics,
        }
        mlflow.log_metrics(
            {
                "epochs_run": epochs_run,
                "best_val_accuracy": headline["best_val_accuracy"],
                "best_val_loss": headline["best_val_loss"],
            }
        )
        # After everything else is logged: the job summary and the pull request compare it with the champion.
        decision = _champion(cfg, run.info.run_id, headline, hooks)
        # Only now, at the run's end: an attempt that dies while it evaluates, exports or logs the model (spot
        # reclaim, cancel) leaves the checkpoint resumable, so the next one finishes this run from the trained
        # weights instead of training again in a new run.
        if store and s3_sync:
            store.mark_complete({"run_id": run.info.run_id, "epochs_done": epochs_run})
    summary = TrainResult(
        run.info.run_id, experiment.experiment_id, uri, headline, epochs_run, decision, model_id
    )
    print(tracking.format_summary(uri, summary.experiment_id, summary.run_id, headline))
    job_contract.append_job_summary(
        tracking.job_summary(uri, summary.experiment_id, summary.run_id, headline)
        + "\n"
        + registry.job_summary(uri, decision)
    )
    # Keep the resolved config next to the exports so a model on disk explains itself.
    (out / "resolved_config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    if cluster is not None:
        _wait_for_every_worker(strategy)
    return summary
