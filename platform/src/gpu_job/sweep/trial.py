"""One trial of a sweep: train with the trial's sampled params as a child run of the sweep's parent run, report
the per-epoch metric to the study (the pruner decides across all trials running at once: they share the
study's storage), and tell the study the result.

What the study holds afterwards: COMPLETE with the objective, PRUNED (stopped early by the pruner, evaluated and
logged all the same), FAIL (training raised; the reason in the trial's user attributes), or still RUNNING when
a spot notice interrupted it (exit 75: the checkpoint is in S3 and the next wave resumes it in the same run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import optuna
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from pydantic import BaseModel

from .. import tracking
from ..errors import TrainingInterrupted
from ..train_hooks import TrainHooks
from . import runs as sweep_runs
from . import study as sweep_study
from .project import SweepProject
from .space import SweepConfig, applied, trial_config


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    # COMPLETE | PRUNED | SKIPPED (already finished) | WORKER (a non-chief worker: the chief's process tells)
    state: str
    value: float | None
    run_id: str | None


def checkpoint_scope(cfg: SweepConfig, number: int) -> str:
    """sweeps/<study>/trial-<n>: one prefix per trial (under the session's own, checkpoints.open_store), so a
    resumed trial finds its own backup and two trials never share one."""
    return f"sweeps/{cfg.study_name}/trial-{number}"


class EpochWatch:
    """The trial's TrainHooks.on_epoch: reports the intermediate metric to the study after every epoch (the
    pruner compares it with the other trials', which share the study's storage) and keeps the per-trial time
    budget. Answers True, which stops the training at the end of this epoch, when the pruner or the clock says
    so; a stopped trial still evaluates, exports and closes its run."""

    def __init__(
        self,
        trial: optuna.trial.Trial,
        metric: str,
        seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self.trial, self.metric, self.seconds, self.clock = trial, metric, seconds, clock
        self.started = clock()
        self.pruned_at: int | None = None
        self.out_of_time_at: int | None = None

    def __call__(self, epoch: int, logs: Mapping[str, float]) -> bool:
        value = logs.get(self.metric)
        if value is None:
            raise KeyError(f"the training logged no '{self.metric}' this epoch; it logged {', '.join(logs)}")
        self.trial.report(float(value), step=epoch)
        if self.trial.should_prune():
            self.pruned_at = epoch
        elif self.clock() - self.started >= self.seconds:
            self.out_of_time_at = epoch
        return self.pruned_at is not None or self.out_of_time_at is not None


def _local_checkpoint_dir(project: SweepProject, cfg: SweepConfig, number: int) -> BaseModel:
    """The base config with a local checkpoint folder of this trial's own."""
    section, _, key = project.rules.checkpoint_dir.partition(".")
    folder = getattr(getattr(project.base, section), key)
    return applied(project.base, {project.rules.checkpoint_dir: f"{folder}/{cfg.study_name}/trial-{number}"})


def _own_child_run(run_id: object, parent: str, number: int) -> str | None:
    """The child run an earlier wave of this trial opened, when the study names one and it is that trial's run
    under this sweep's parent. Trial jobs may write the study, so a recorded id naming any other run (another
    trial's, a champion's) is not continued: the trial opens a new child run and says why."""
    if not run_id:
        return None
    try:
        tags = MlflowClient(tracking.tracking_uri()).get_run(str(run_id)).data.tags
    except MlflowException as error:
        print(
            f"trial {number}: the study's run {run_id!r} is not readable ({error.error_code}): a new child run"
        )
        return None
    if (tags.get(sweep_runs.PARENT_RUN_TAG), tags.get(sweep_runs.TRIAL_TAG)) != (parent, str(number)):
        print(f"trial {number}: the study's run {run_id!r} is not this trial's child run: a new child run")
        return None
    return str(run_id)


def run_trial(
    cfg: SweepConfig,
    project: SweepProject,
    root: str,
    number: int,
    checkpoint_root: str,
    clock: Callable[[], float] = time.monotonic,
) -> TrialOutcome:
    """Train trial `number` of the study under `root` through the project's training; raises
    TrainingInterrupted (trial left RUNNING for the next wave) or the training's own error (trial told FAIL
    first). `clock` times budget.minutes_per_trial."""
    study = sweep_study.open_study(cfg, root)
    frozen = sweep_study.trial_by_number(study, number)
    if frozen.state != TrialState.RUNNING:
        # A re-run of a finished wave's job: the result is in the study already, nothing to train or to bill.
        print(f"trial {number} is {frozen.state.name} already: nothing to train")
        return TrialOutcome(number, "SKIPPED", frozen.value, frozen.user_attrs.get(sweep_study.RUN_ID_ATTR))
    trial = sweep_study.live_trial(study, number)
    trial.set_user_attr(sweep_study.ATTEMPTS_ATTR, frozen.user_attrs.get(sweep_study.ATTEMPTS_ATTR, 0) + 1)
    trial.set_user_attr(sweep_study.INTERRUPTED_ATTR, False)
    parent = study.user_attrs[sweep_study.PARENT_RUN_ATTR]
    earlier_run = _own_child_run(frozen.user_attrs.get(sweep_study.RUN_ID_ATTR), parent, number)
    base = _local_checkpoint_dir(project, cfg, number)
    train_cfg = trial_config(base, project.rules, cfg, frozen.params, checkpoint_root)
    watch = EpochWatch(
        trial, cfg.intermediate_metric(project.rules), cfg.budget.minutes_per_trial * 60, clock
    )
    hooks = TrainHooks(
        tags=sweep_runs.child_tags(parent, cfg, number, frozen.params),
        run_name=f"{cfg.study_name} trial {number}",
        on_epoch=watch,
        checkpoint_scope=checkpoint_scope(cfg, number),
        decide_champion=False,
        skip_reason="sweep trial: the sweep compares its best trial only, when it ends",
        run_id=earlier_run,
        on_run=lambda run_id: trial.set_user_attr(sweep_study.RUN_ID_ATTR, run_id),
    )
    try:
        result = project.train(train_cfg, hooks)
    except TrainingInterrupted:
        trial.set_user_attr(sweep_study.INTERRUPTED_ATTR, True)
        raise
    except Exception as error:
        trial.set_user_attr(sweep_study.FAILURE_ATTR, f"{type(error).__name__}: {error}"[:500])
        study.tell(number, state=TrialState.FAIL)
        raise
    if result is None:
        # A non-chief worker of a multi-worker trial: the chief's process reports and tells.
        return TrialOutcome(number, "WORKER", None, None)
    trial.set_user_attr(sweep_study.RUN_ID_ATTR, result.run_id)
    if result.model_id:
        trial.set_user_attr("sweep.model_id", result.model_id)
    if watch.out_of_time_at is not None:
        trial.set_user_attr(
            "sweep.stopped_by", f"budget.minutes_per_trial after epoch {watch.out_of_time_at}"
        )
    if watch.pruned_at is not None:
        study.tell(number, state=TrialState.PRUNED)
        print(f"trial {number}: pruned after epoch {watch.pruned_at}")
        return TrialOutcome(number, "PRUNED", None, result.run_id)
    value = result.metrics[cfg.objective.metric]
    study.tell(number, value)
    print(f"trial {number}: {cfg.objective.metric} = {value:.4f}")
    return TrialOutcome(number, "COMPLETE", value, result.run_id)
