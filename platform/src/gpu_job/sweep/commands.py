"""The sweep's commands: `plan`, `trial` and `collect` (one per sweep.yml job) and `local`, which runs the same
waves in this process, trials one after another, against the local MLflow store (a project's `make sweep`).

A project's CLI calls them with its SweepProject; errors the user can act on are raised as SweepConfigError
(or StudyStorageError) and printed by the CLI.
"""

from __future__ import annotations

from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient

from .. import job_contract, tracking
from ..errors import EXIT_INTERRUPTED, TrainingInterrupted
from . import collect as sweep_collect
from . import plan as sweep_plan
from . import trial as sweep_trial
from .project import SweepProject
from .space import SweepConfig

LOCAL_ROOT = "outputs/sweeps"


def route_optuna_logs() -> None:
    """Optuna's warnings through Python's root logger, its INFO lines off: the sweep prints its own line per
    trial, and Optuna's default handler keeps the stderr it found at import (a replaced stream, e.g. under a
    test's capture, then fails on every line)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()


def _client() -> MlflowClient:
    return MlflowClient(tracking.tracking_uri())


def plan(
    cfg: SweepConfig, project: SweepProject, root: str, runners: int, wave: int | None = None
) -> sweep_plan.WavePlan:
    result = sweep_plan.plan_wave(cfg, root, _client(), project.experiment, runners, wave)
    job_contract.write_step_output(job_contract.SWEEP_MATRIX_OUTPUT, result.matrix())
    job_contract.write_step_output(job_contract.SWEEP_WAVE_OUTPUT, str(result.wave))
    job_contract.write_step_output(job_contract.SWEEP_TRIALS_OUTPUT, str(len(result.trials)))
    job_contract.write_step_output(job_contract.SWEEP_PARENT_RUN_OUTPUT, result.parent_run_id)
    job_contract.append_job_summary(result.summary())
    print(result.summary())
    return result


def trial(cfg: SweepConfig, project: SweepProject, root: str, number: int, checkpoint_root: str) -> int:
    """The exit status of one trial: 0, or EXIT_INTERRUPTED when a spot notice stopped it (the next wave
    resumes it)."""
    try:
        sweep_trial.run_trial(cfg, project, root, number, checkpoint_root)
    except TrainingInterrupted as stopped:
        print(f"trial {number} interrupted: {stopped}; the next wave resumes it from its checkpoint")
        return EXIT_INTERRUPTED
    return 0


def collect(cfg: SweepConfig, project: SweepProject, root: str, wave: int) -> sweep_collect.Collected:
    client = _client()
    result = sweep_collect.collect_wave(cfg, project.champion, root, client, wave)
    job_contract.write_step_output(
        job_contract.SWEEP_NEXT_WAVE_OUTPUT, "true" if result.next_wave else "false"
    )
    experiment_id = client.get_run(result.parent_run_id).info.experiment_id
    text = sweep_collect.summary(result, cfg, tracking.tracking_uri(), experiment_id)
    job_contract.append_job_summary(text)
    print(text)
    return result


def local(
    cfg: SweepConfig, project: SweepProject, root: str = LOCAL_ROOT, max_waves: int = 1000
) -> sweep_collect.Collected:
    """Every wave in this process: plan `parallel` trials, train them one after another, collect; until done."""
    Path(root).mkdir(parents=True, exist_ok=True)
    for _ in range(max_waves):
        wave = plan(cfg, project, root, runners=cfg.parallel)
        for number in wave.trials:
            trial(cfg, project, root, number, checkpoint_root="")
        result = collect(cfg, project, root, wave.wave)
        if result.finished:
            return result
    raise RuntimeError(f"the sweep did not finish within {max_waves} waves")
