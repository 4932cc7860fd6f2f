"""What a caller adds to one training of a project (a sweep trial: gpu_job.sweep.trial), in plain Python.

The project's training function takes a TrainHooks and honours every field; the fields are framework-free
(no Keras callback here), so the sweep that fills them stays TensorFlow-free and its tests run with any
training. The project adapts `on_epoch` to its framework (the template's callbacks.EpochHook for Keras).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class TrainHooks:
    # Tags and a name for the run (a sweep trial's child-run tags: nested under the sweep's parent run).
    tags: Mapping[str, str] = field(default_factory=dict)
    run_name: str | None = None
    # The run to continue when no checkpoint names one (a sweep trial lost before its first backup reached S3
    # resumes in its own child run), and who learns the run's id as soon as it is open (the study records it).
    run_id: str | None = None
    on_run: Callable[[str], None] | None = None
    # Called after every epoch is logged and backed up, with the epoch (from 0) and what the framework logged
    # that epoch (`val_accuracy`, `val_loss`, ...); True stops the training at the end of that epoch, gracefully:
    # the run still evaluates, exports and ends FINISHED (a pruned trial, a trial out of time).
    on_epoch: Callable[[int, Mapping[str, float]], bool] | None = None
    # A sub-path of the checkpoint prefix that is this run's alone (a sweep trial's `sweeps/<study>/trial-<n>`).
    checkpoint_scope: str = ""
    # Whether this run takes part in the champion rule (a sweep decides for its best trial only, when it ends),
    # and the words of the decision when it does not.
    decide_champion: bool = True
    skip_reason: str = ""


class TrainOutcome(Protocol):
    """What the caller reads back from a training: its MLflow run, its headline metrics, its logged model."""

    @property
    def run_id(self) -> str: ...

    @property
    def metrics(self) -> Mapping[str, float]: ...

    @property
    def model_id(self) -> str | None: ...
