"""One trial of a sweep: train with the trial's sampled params as a child run of the sweep's parent run, report
the per-epoch metric to the study (the pruner decides across all trials running at once: they share the
study's storage), and tell the study the result.

What the study holds afterwards: COMPLETE with the objective, PRUNED (stopped early by the pruner, evaluated and
logged all the same), FAIL (training raised; the reason in the trial's user attributes), or still RUNNING when
a spot notice interrupted it (exit 75: the checkpoint is in S3 and the next wave resumes it in the same run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import optuna
from gpu_job import tracking
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from . import sweep_runs, sweep_study, train
from .callbacks import EpochReporter, TimeBudget
from .config import Config
from .errors import TrainingInterrupted
from .sweep_config import SweepConfig, trial_config


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    state: str  # COMPLETE | PRUNED | SKIPPED (already finished)
    value: float | None
    run_id: str | None


def checkpoint_scope(cfg: SweepConfig, number: int) -> str:
    """sweeps/<study>/trial-<n>: one prefix per trial (under the session's own, checkpoints.open_store), so a
    resumed trial finds its own backup and two trials never share one."""
    return f"sweeps/{cfg.study_name}/trial-{number}"


def _reporter(trial: optuna.trial.Trial):
    def report(epoch: int, value: float) -> bool:
        trial.report(value, step=epoch)
        return trial.should_prune()

    return report


def _local_checkpoint_dir(base: Config, cfg: SweepConfig, number: int) -> Config:
    raw = base.model_dump(mode="json")
    raw["training"]["checkpoint_dir"] = f"{raw['training']['checkpoint_dir']}/{cfg.study_name}/trial-{number}"
    return Config.model_validate(raw)


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


def run_trial(cfg: SweepConfig, base: Config, root: str, number: int, checkpoint_root: str) -> TrialOutcome:
    """Train trial `number` of the study under `root`; raises TrainingInterrupted (trial left RUNNING for the
    next wave) or the training's own error (trial told FAIL first)."""
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
    train_cfg = trial_config(
        _local_checkpoint_dir(base, cfg, number),
        cfg,
        frozen.params,
        checkpoint_root,
    )
    reporter = EpochReporter(cfg.intermediate_metric, _reporter(trial))
    budget = TimeBudget(cfg.budget.minutes_per_trial * 60, time.monotonic)
    hooks = train.TrainHooks(
        tags=sweep_runs.child_tags(parent, cfg, number, frozen.params),
        run_name=f"{cfg.study_name} trial {number}",
        callbacks=(reporter, budget),
        checkpoint_scope=checkpoint_scope(cfg, number),
        decide_champion=False,
        skip_reason="sweep trial: the sweep compares its best trial only, when it ends",
        run_id=earlier_run,
        on_run=lambda run_id: trial.set_user_attr(sweep_study.RUN_ID_ATTR, run_id),
    )
    try:
        result = train.train(train_cfg, hooks=hooks)
    except TrainingInterrupted:
        trial.set_user_attr(sweep_study.INTERRUPTED_ATTR, True)
        raise
    except Exception as error:
        trial.set_user_attr(sweep_study.FAILURE_ATTR, f"{type(error).__name__}: {error}"[:500])
        study.tell(number, state=TrialState.FAIL)
        raise
    trial.set_user_attr(sweep_study.RUN_ID_ATTR, result.run_id)
    if result.model_id:
        trial.set_user_attr("sweep.model_id", result.model_id)
    if budget.stopped_at is not None:
        trial.set_user_attr("sweep.stopped_by", f"budget.minutes_per_trial after epoch {budget.stopped_at}")
    if reporter.stopped_at is not None:
        study.tell(number, state=TrialState.PRUNED)
        print(f"trial {number}: pruned after epoch {reporter.stopped_at}")
        return TrialOutcome(number, "PRUNED", None, result.run_id)
    value = result.metrics[cfg.objective.metric]
    study.tell(number, value)
    print(f"trial {number}: {cfg.objective.metric} = {value:.4f}")
    return TrialOutcome(number, "COMPLETE", value, result.run_id)
