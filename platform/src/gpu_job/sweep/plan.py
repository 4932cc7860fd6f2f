"""The plan of one wave: which trials run now, one GPU runner each.

Order of the checks, all before anything is launched: the sweep config against the training config (by the
caller), the study's search space, the whole-sweep budget, then the wave claim (two plan jobs cannot plan the
same wave: study_storage.claim_wave is a create-only write), and only then trials are asked. Trials left
running by the last wave (interrupted or lost) are resumed first, in their own child run, from their S3
checkpoint; then new trials are asked until `parallel`, the runners the vCPU quota allows, or `trials`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import optuna
from mlflow.tracking import MlflowClient

from .. import study_storage
from ..errors import SweepConfigError
from . import runs as sweep_runs
from . import study as sweep_study
from .space import SweepConfig


class BudgetSpent(SweepConfigError):
    """The whole-sweep budget is used up: no wave may start."""


class WaveOutOfOrder(SweepConfigError):
    """A dispatch asked for a wave that is not the study's next (another plan job went first)."""


@dataclass(frozen=True)
class WavePlan:
    study_name: str
    wave: int
    parent_run_id: str
    resumed: tuple[int, ...]
    new: tuple[int, ...]
    failed_for_good: tuple[int, ...] = ()
    # Why fewer trials than `parallel` run, in words (quota, trials left); empty when none.
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Each trial's attempt in this wave (the waves it was planned in, this one included): its runner's attempt
    # and the step of its cost and training_seconds on the child run, so every instance of it is billed once.
    attempts: dict[int, int] = field(default_factory=dict)

    @property
    def trials(self) -> tuple[int, ...]:
        return self.resumed + self.new

    def matrix(self) -> str:
        """The workflow's matrix: `{"include": [{"trial": 3, "attempt": 1}, ...]}` (strategy.matrix from
        fromJSON)."""
        include = [{"trial": n, "attempt": self.attempts.get(n, 1)} for n in self.trials]
        return json.dumps({"include": include}, separators=(",", ":"))

    def summary(self) -> str:
        lines = [f"### Sweep {self.study_name}: wave {self.wave}", ""]
        lines.append(f"- trials now: {', '.join(map(str, self.trials)) or 'none'}")
        if self.resumed:
            resumed = (f"{n} (attempt {self.attempts.get(n, 1)})" for n in self.resumed)
            lines.append(f"- resumed from their checkpoints: {', '.join(resumed)}")
        if self.failed_for_good:
            lines.append(f"- failed after their last attempt: {', '.join(map(str, self.failed_for_good))}")
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def _parent_run(client: MlflowClient, study: optuna.Study, cfg: SweepConfig, experiment: str) -> str:
    run_id = study.user_attrs.get(sweep_study.PARENT_RUN_ATTR)
    if run_id:
        return run_id
    run_id = sweep_runs.create_parent(client, experiment, cfg)
    study.set_user_attr(sweep_study.PARENT_RUN_ATTR, run_id)
    return run_id


def plan_wave(
    cfg: SweepConfig,
    root: str,
    client: MlflowClient,
    experiment: str,
    runners_allowed: int,
    wave: int | None = None,
) -> WavePlan:
    """Plan the next wave (or `wave`, which must be the next); raises before asking anything when the budget is
    spent, the space changed or another plan job claimed this wave."""
    uri = sweep_study.storage_uri(root, cfg.study_name)
    next_wave = study_storage.latest_wave(uri) + 1
    if wave is not None and wave != next_wave:
        raise WaveOutOfOrder(
            f"--wave: wave {wave} cannot be planned: the study '{cfg.study_name}' is at wave {next_wave - 1}, so "
            f"the next is {next_wave} (another plan job went first; its run continues the sweep)"
        )
    study = sweep_study.open_study(cfg, root, wave=next_wave, create=True)
    parent = _parent_run(client, study, cfg, experiment)
    spent = sweep_runs.totals(client, parent).spent_line(cfg)
    if spent:
        raise BudgetSpent(
            f"{spent}: nothing launched. Raise the budget in configs/sweep.yaml or end the sweep."
        )
    if runners_allowed < 1:
        raise SweepConfigError("--runners: the vCPU quota allows no GPU runner now; nothing launched")
    claim = {
        "run": os.environ.get("GITHUB_RUN_ID", "local"),
        "parallel": cfg.parallel,
        "runners": runners_allowed,
    }
    study_storage.claim_wave(uri, next_wave, claim)

    # Told through a study that only tells (see open_study): the grid sampler must not see these results.
    failed = sweep_study.fail_exhausted(sweep_study.open_study(cfg, root), cfg.budget.max_attempts_per_trial)
    resume = [
        t.number
        for t in sweep_study.resumable(study.get_trials(deepcopy=False), cfg.budget.max_attempts_per_trial)[0]
    ]
    slots = min(cfg.parallel, runners_allowed)
    notes = []
    if runners_allowed < cfg.parallel:
        notes.append(f"{runners_allowed} runner(s) of parallel {cfg.parallel}: the vCPU quota allows no more")
    resumed = resume[:slots]
    if len(resume) > slots:
        notes.append(f"trials {', '.join(map(str, resume[slots:]))} wait for the next wave")
    asked_so_far = len(study.get_trials(deepcopy=False))
    room = max(0, min(slots - len(resumed), cfg.trials - asked_so_far))
    new = []
    space = sweep_study.distributions(cfg)
    for _ in range(room):
        trial = study.ask(space)
        new.append(trial.number)
    attempts = {}
    for number in resumed + new:
        live = sweep_study.live_trial(study, number)
        waves = [*sweep_study.waves_of(sweep_study.trial_by_number(study, number)), next_wave]
        live.set_user_attr(sweep_study.WAVES_ATTR, waves)
        attempts[number] = len(waves)
    if not resumed and not new:
        notes.append(f"all {cfg.trials} trials asked and none left to resume: nothing to run")
    return WavePlan(
        cfg.study_name, next_wave, parent, tuple(resumed), tuple(new), tuple(failed), tuple(notes),
        attempts=attempts,
    )  # fmt: skip
