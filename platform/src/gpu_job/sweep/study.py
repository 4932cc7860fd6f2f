"""The Optuna study of a sweep: where it is stored, its sampler and pruner, and the checks every job makes when it
opens it (the search space has not changed since the study's first wave).

MLflow-free: the plan, trial and collect jobs each open the study through `open_study`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from .. import study_storage
from ..errors import SweepConfigError
from .space import Choice, FloatRange, IntRange, SweepConfig, encode_choice, grid_values

# Study user attributes (Optuna keeps them in the journal, next to the trials).
SPACE_ATTR = "sweep.space"
PARENT_RUN_ATTR = "sweep.mlflow_parent_run_id"
# Trial user attributes.
WAVES_ATTR = "sweep.waves"  # the waves this trial was (re)started in
ATTEMPTS_ATTR = "sweep.attempts"  # trial jobs that started training it
RUN_ID_ATTR = "sweep.mlflow_run_id"  # its child run
FAILURE_ATTR = "sweep.failure"  # why it was marked failed
INTERRUPTED_ATTR = "sweep.interrupted"  # the last attempt stopped on a spot notice (checkpoint in S3)


class SpaceChanged(SweepConfigError):
    """configs/sweep.yaml's space (or direction) differs from the one the study was started with."""


def storage_uri(root: str, study_name: str) -> str:
    """Where one study lives: s3://<bucket>/sweeps/<study>/ in CI, outputs/sweeps/<study>/ locally."""
    return f"{root.rstrip('/')}/{study_name}/"


def distributions(cfg: SweepConfig) -> dict[str, BaseDistribution]:
    """Optuna's distributions of the search space, by dotted path (the param names of every trial)."""
    out: dict[str, BaseDistribution] = {}
    for path, spec in cfg.space.items():
        if isinstance(spec, FloatRange):
            out[path] = FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
        elif isinstance(spec, IntRange):
            out[path] = IntDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
        elif isinstance(spec, Choice):
            out[path] = CategoricalDistribution([encode_choice(c) for c in spec.choices])
    return out


def sampler_for(cfg: SweepConfig, wave: int) -> optuna.samplers.BaseSampler:
    """The configured sampler. Samplers keep no state in the storage, so each plan job makes a new one; the seed
    moves with the wave, or every wave would sample the same points again."""
    seed = cfg.sampler.seed + wave
    if cfg.sampler.name == "grid":
        space = {path: grid_values(spec) for path, spec in cfg.space.items()}
        return optuna.samplers.GridSampler(space, seed=seed)
    if cfg.sampler.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials asked in one wave run at the same time; without it TPE would ask the same point
    # `parallel` times, since none of them has a result yet (TPESampler docstring, Optuna 4.9).
    with warnings.catch_warnings():
        # constant_liar is marked experimental in Optuna 4.9; it is what parallel trials need.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True, n_startup_trials=min(10, cfg.trials))


def pruner_for(cfg: SweepConfig) -> optuna.pruners.BasePruner:
    p = cfg.pruner
    if p.name == "none":
        return optuna.pruners.NopPruner()
    if p.name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_epochs)
    if p.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=p.min_epochs,
            max_resource=cfg.budget.epochs_per_trial,
            reduction_factor=p.reduction_factor,
        )
    return optuna.pruners.SuccessiveHalvingPruner(
        min_resource=p.min_epochs, reduction_factor=p.reduction_factor
    )


def space_changes(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One line per dotted path that was added, removed or changed."""
    lines = []
    for path in sorted(set(stored) | set(current)):
        if path not in current:
            lines.append(f"space.{path}: removed (the study has {json.dumps(stored[path])})")
        elif path not in stored:
            lines.append(f"space.{path}: added (the study was started without it)")
        elif stored[path] != current[path]:
            lines.append(
                f"space.{path}: changed from {json.dumps(stored[path])} to {json.dumps(current[path])}"
            )
    return lines


def open_study(cfg: SweepConfig, root: str, wave: int = 0, create: bool = False) -> optuna.Study:
    """The study `cfg.study_name` under `root`; with `create` (the plan job, the only one that asks), made on
    first use and with the configured sampler. Refuses a study whose search space differs from this config's:
    its trials would not be comparable (SpaceChanged names each path).

    Jobs that only tell (trial, collect) get a RandomSampler, which ignores results: GridSampler.after_trial
    calls Study.stop() once the grid is used up, and outside study.optimize that raises RuntimeError (Optuna
    4.9, optuna/samplers/_grid.py), which failed the last grid trial's tell (found by the offline sweep story)."""
    uri = storage_uri(root, cfg.study_name)
    storage = study_storage.open_study_storage(uri)
    direction = cfg.objective.direction
    sampler = sampler_for(cfg, wave) if create else optuna.samplers.RandomSampler()
    kwargs = {"storage": storage, "sampler": sampler, "pruner": pruner_for(cfg)}
    if create:
        study = optuna.create_study(
            study_name=cfg.study_name, direction=direction, load_if_exists=True, **kwargs
        )
    else:
        try:
            study = optuna.load_study(study_name=cfg.study_name, **kwargs)
        except KeyError:
            raise SweepConfigError(
                f"study_name: no study '{cfg.study_name}' in {uri}; the plan job creates it (run the sweep)"
            ) from None
    if study.direction.name.lower() != direction:
        raise SpaceChanged(
            f"objective.direction: the study '{cfg.study_name}' in {uri} was started to "
            f"{study.direction.name.lower()}; use that, or a new study_name"
        )
    stored = study.user_attrs.get(SPACE_ATTR)
    if stored is None:
        study.set_user_attr(SPACE_ATTR, cfg.space_json())
    elif changes := space_changes(stored, cfg.space_json()):
        raise SpaceChanged(
            f"the study '{cfg.study_name}' in {uri} was started with another search space:\n  "
            + "\n  ".join(changes)
            + "\nRestore the space in configs/sweep.yaml, or give the new one its own study_name."
        )
    return study


def trial_by_number(study: optuna.Study, number: int) -> FrozenTrial:
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            return trial
    raise SweepConfigError(f"--trial: the study '{study.study_name}' has no trial {number}")


def in_wave(trials: Iterable[FrozenTrial], wave: int) -> list[FrozenTrial]:
    return [t for t in trials if wave in t.user_attrs.get(WAVES_ATTR, [])]


def left_running(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """Trials whose job ended without telling a result: interrupted (a spot notice) or lost (the instance or
    job died, or its runner never came up). The next wave resumes them."""
    return [t for t in trials if t.state == TrialState.RUNNING]


def waves_of(trial: FrozenTrial) -> list[int]:
    return list(trial.user_attrs.get(WAVES_ATTR, []))


def resumable(
    trials: Iterable[FrozenTrial], max_attempts: int
) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """(left running and planned in fewer than `max_attempts` waves, left running and out of attempts). Waves,
    not trial-job starts, are counted: a trial whose runner never came up never started, and must end too."""
    left = left_running(trials)
    return (
        [t for t in left if len(waves_of(t)) < max_attempts],
        [t for t in left if len(waves_of(t)) >= max_attempts],
    )


def live_trial(study: optuna.Study, number: int) -> optuna.trial.Trial:
    """The running trial `number` as a live Trial (report, should_prune, set_user_attr) in this process.

    Optuna's public way to reach a trial another process asked is Trial(study, trial_id); the id is only on the
    FrozenTrial's `_trial_id` (Optuna 4.9 has no public accessor for it)."""
    return optuna.trial.Trial(study, trial_by_number(study, number)._trial_id)


def fail_exhausted(study: optuna.Study, max_attempts: int) -> list[int]:
    """Tell FAIL for each trial left running that has had its last wave; the reason goes into its user
    attributes. Both the plan and the collect job call it, so no trial stays RUNNING once the sweep ends."""
    _, exhausted = resumable(study.get_trials(deepcopy=False), max_attempts)
    for trial in exhausted:
        reason = (
            f"no result after {len(waves_of(trial))} wave(s) (budget.max_attempts_per_trial {max_attempts})"
        )
        live_trial(study, trial.number).set_user_attr(FAILURE_ATTR, reason)
        study.tell(trial.number, state=TrialState.FAIL)
    return [t.number for t in exhausted]
