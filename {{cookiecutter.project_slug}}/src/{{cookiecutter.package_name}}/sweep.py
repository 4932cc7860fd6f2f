"""The sweep's commands: `plan`, `trial` and `collect` (one per sweep.yml job) and `local`, which runs the same
waves in this process on the CPU (trials one after another) against the local MLflow store: `make sweep`.

Each function returns the exit status; errors the user can act on are raised as ConfigError subclasses and
printed by the CLI.
"""

from __future__ import annotations

from pathlib import Path

import optuna
from gpu_job import job_contract, tracking
from mlflow.tracking import MlflowClient

from . import sweep_collect, sweep_plan
from .config import Config
from .errors import EXIT_INTERRUPTED, TrainingInterrupted
from .sweep_config import SweepConfig

LOCAL_ROOT = "outputs/sweeps"


def route_optuna_logs() -> None:
    """Optuna's warnings through Python's root logger, its INFO lines off: this package prints its own line per
    trial, and Optuna's default handler keeps the stderr it found at import (a replaced stream, e.g. under a
    test's capture, then fails on every line)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()


def _client() -> MlflowClient:
    return MlflowClient(tracking.tracking_uri())


def plan(
    cfg: SweepConfig, base: Config, root: str, runners: int, wave: int | None = None
) -> sweep_plan.WavePlan:
    result = sweep_plan.plan_wave(cfg, root, _client(), base.tracking.experiment_name, runners, wave)
    job_contract.write_step_output(job_contract.SWEEP_MATRIX_OUTPUT, result.matrix())
    job_contract.write_step_output(job_contract.SWEEP_WAVE_OUTPUT, str(result.wave))
    job_contract.write_step_output(job_contract.SWEEP_TRIALS_OUTPUT, str(len(result.trials)))
    job_contract.write_step_output(job_contract.SWEEP_PARENT_RUN_OUTPUT, result.parent_run_id)
    job_contract.append_job_summary(result.summary())
    print(result.summary())
    return result


def trial(cfg: SweepConfig, base: Config, root: str, number: int, checkpoint_root: str) -> int:
    # Here, not at the top: the trial trains (TensorFlow, seconds to import), plan and collect do not.
    from . import sweep_trial

    try:
        sweep_trial.run_trial(cfg, base, root, number, checkpoint_root)
    except TrainingInterrupted as stopped:
        print(f"trial {number} interrupted: {stopped}; the next wave resumes it from its checkpoint")
        return EXIT_INTERRUPTED
    return 0


def collect(cfg: SweepConfig, base: Config, root: str, wave: int) -> sweep_collect.Collected:
    client = _client()
    result = sweep_collect.collect_wave(cfg, base, root, client, wave)
    job_contract.write_step_output(
        job_contract.SWEEP_NEXT_WAVE_OUTPUT, "true" if result.next_wave else "false"
    )
    experiment_id = client.get_run(result.parent_run_id).info.experiment_id
    text = sweep_collect.summary(result, cfg, tracking.tracking_uri(), experiment_id)
    job_contract.append_job_summary(text)
    print(text)
    return result


def local(
    cfg: SweepConfig, base: Config, root: str = LOCAL_ROOT, max_waves: int = 1000
) -> sweep_collect.Collected:
    """Every wave in this process: plan `parallel` trials, train them one after another, collect; until done."""
    Path(root).mkdir(parents=True, exist_ok=True)
    result = None
    for _ in range(max_waves):
        wave = plan(cfg, base, root, runners=cfg.parallel)
        for number in wave.trials:
            trial(cfg, base, root, number, checkpoint_root="")
        result = collect(cfg, base, root, wave.wave)
        if result.finished:
            return result
    raise RuntimeError(f"the sweep did not finish within {max_waves} waves")
