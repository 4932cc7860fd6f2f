"""The Keras callbacks of a training: they adapt the TensorFlow-free tracking, checkpoints and interruption
modules to `model.fit`.

The one module besides the model code that imports TensorFlow for them: MLflow logging, the S3 mirror and the
IMDS watcher stay plain Python (testable and importable without TensorFlow), and only these adapters know
Keras' callback hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import mlflow
import tensorflow as tf
from gpu_job.checkpoints import S3Checkpoints
from gpu_job.interruption import InterruptionWatcher

from .errors import TrainingInterrupted


class MlflowEpochLogger(tf.keras.callbacks.Callback):
    """Logs every Keras metric at the end of each epoch, with the epoch as the MLflow step."""

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float] | None = None) -> None:
        if logs:
            mlflow.log_metrics({name: float(value) for name, value in logs.items()}, step=epoch)


class S3CheckpointSync(tf.keras.callbacks.Callback):
    """Pushes the local backup to S3 whenever BackupAndRestore (earlier in the callback list) wrote a new one."""

    def __init__(
        self, store: S3Checkpoints, run_id: str, initial_epochs: int = 0, per_batch: bool = False
    ) -> None:
        super().__init__()
        self.store, self.run_id = store, run_id
        self.epochs_done = initial_epochs
        # Batch-count backups (checkpoint_every: N) need a look after every batch; epoch backups do not.
        self.per_batch = per_batch
        self.pushes = 0
        self._last_seen: float = 0.0

    def _newest_write(self) -> float:
        return max((p.stat().st_mtime for p in self.store.local_dir.rglob("*") if p.is_file()), default=0.0)

    def push_if_new(self, batch: int | None = None) -> None:
        newest = self._newest_write()
        if newest > self._last_seen:
            self._last_seen = newest
            self.store.push(
                # Keras hands numpy integers after a restore; JSON wants Python ones.
                {
                    "run_id": self.run_id,
                    "epochs_done": int(self.epochs_done),
                    "batch": None if batch is None else int(batch),
                }
            )
            self.pushes += 1

    def _implements_train_batch_hooks(self) -> bool:
        return self.per_batch

    def on_train_batch_end(self, batch: int, logs: Mapping[str, float] | None = None) -> None:
        if self.per_batch:
            self.push_if_new(batch)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float] | None = None) -> None:
        self.epochs_done = epoch + 1
        self.push_if_new(None)


class StopOnInterruption(tf.keras.callbacks.Callback):
    """Acts on the watcher's notices between batches (the only safe place to save a consistent state).

    `backup` is the BackupAndRestore callback: with a batch-count checkpoint interval it is asked for one more
    backup of the current position; with "epoch" the last epoch's backup is what resumes (a mid-epoch backup
    would be read back as a finished epoch)."""

    def __init__(
        self,
        watcher: InterruptionWatcher,
        push: Callable[[int], object],
        backup: tf.keras.callbacks.Callback | None,
        every: str | int,
        initial_epochs: int = 0,
    ) -> None:
        super().__init__()
        self.watcher, self.push, self.backup, self.every = watcher, push, backup, every
        self._rebalance_handled = False
        self.epochs_done = initial_epochs

    def _checkpoint_now(self, epoch: int, batch: int) -> None:
        if self.backup is not None and self.every != "epoch":
            # Keras 2.15's own batch-level backup (what save_freq=N calls): resumes at this epoch and batch.
            self.backup._backup(epoch=epoch, batch=batch)
        self.push(batch)

    def _last_batch(self, batch: int) -> bool:
        return batch == (self.params or {}).get("steps", -1) - 1

    def on_train_batch_end(self, batch: int, logs: Mapping[str, float] | None = None) -> None:
        epoch = self.backup._current_epoch if self.backup is not None else 0
        if self.watcher.rebalance is not None and not self._rebalance_handled:
            self._rebalance_handled = True
            self._checkpoint_now(epoch, batch)
        # On an epoch's last batch, let the epoch end first: a backup there reads back as a finished epoch, so
        # its validation metrics must be logged before training stops.
        if self.watcher.instance_action is not None and not self._last_batch(batch):
            self._checkpoint_now(epoch, batch)
            raise TrainingInterrupted(self.watcher.instance_action.detail, self.epochs_done)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float] | None = None) -> None:
        self.epochs_done = epoch + 1
        if self.watcher.instance_action is not None:
            self._checkpoint_now(epoch, (self.params or {}).get("steps", 1) - 1)
            raise TrainingInterrupted(self.watcher.instance_action.detail, self.epochs_done)


class EpochHook(tf.keras.callbacks.Callback):
    """Hands every epoch's logs to a caller's `on_epoch(epoch, logs)` (gpu_job.train_hooks.TrainHooks: a sweep
    trial's pruner and time budget); when it answers True, training stops at the end of this epoch.

    Stops gracefully (model.stop_training) instead of raising the way optuna-integration's Keras callback does:
    the stopped trial still evaluates, exports and closes its MLflow run, so its child run is complete."""

    def __init__(self, on_epoch: Callable[[int, Mapping[str, float]], bool]) -> None:
        super().__init__()
        self.on_epoch = on_epoch

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float] | None = None) -> None:
        if self.on_epoch(int(epoch), {name: float(value) for name, value in (logs or {}).items()}):
            self.model.stop_training = True
