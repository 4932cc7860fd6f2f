"""This project's training under the platform's sweep (gpu_job.sweep, tested there with a toy training): the
seam in sweep_project.py with real TensorFlow on the digits, a real MLflow server and, for the spot resume,
the moto server's S3. Each trial trains with its sampled params as a child run; the pruner's answer stops a
Keras training through callbacks.EpochHook; an interrupted trial resumes from its own S3 checkpoint scope."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import boto3
import pytest
from gpu_job.checkpoints import S3Checkpoints, caller_identity, config_hash, session_prefix
from gpu_job.sweep import commands, runs, study, trial
from gpu_job.sweep.space import SweepConfig, decode_choice, trial_config, validate_sweep
from gpu_runner_testing.imds_double import ImdsDouble
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from {{ cookiecutter.package_name }}.config import Config, config_from_dict
from {{ cookiecutter.package_name }}.errors import EXIT_INTERRUPTED
from {{ cookiecutter.package_name }}.sweep_project import SEARCH_RULES, sweep_project

pytestmark = pytest.mark.slow


def base_config(tmp: Path, **training: object) -> Config:
    return config_from_dict(
        {
            "training": {"checkpoint_dir": str(tmp / "ckpt"), "early_stopping_patience": 50, **training},
            "export": {"output_dir": str(tmp / "out"), "tflite": False, "tflite_int8": False},
            "tracking": {"experiment_name": "sweep-tests", "log_system_metrics": False},
            # One model name per test: the tracking server is shared by the session.
            "registry": {"model_name": f"sweep-{tmp.name}"},
        }
    )


def sweep_config(base: Config, **fields: object) -> SweepConfig:
    raw = {
        "study_name": "digits",
        "space": {
            "training.learning_rate": {"type": "float", "low": 0.001, "high": 0.01, "log": True},
            "model.filters": {"type": "categorical", "choices": [[8, 16], [16]]},
        },
        "trials": 2,
        "parallel": 2,
        "pruner": {"name": "none"},
        "budget": {"epochs_per_trial": 2},
    }
    raw.update(fields)
    return validate_sweep(raw, base, SEARCH_RULES)


@pytest.fixture
def tracking(mlflow_server: str, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return MlflowClient(mlflow_server)


def test_a_local_sweep_trains_the_project_as_child_runs(tracking: MlflowClient, in_tmp: Path) -> None:
    base = base_config(in_tmp)
    cfg = sweep_config(base)
    root = str(in_tmp / "sweeps")

    result = commands.local(cfg, sweep_project(base), root)

    opened = study.open_study(cfg, root)
    assert [t.state for t in opened.trials] == [TrialState.COMPLETE] * 2
    children = runs.children(tracking, result.parent_run_id)
    assert sorted(int(r.data.tags[runs.TRIAL_TAG]) for r in children) == [0, 1]
    for run in children:
        frozen = study.trial_by_number(opened, int(run.data.tags[runs.TRIAL_TAG]))
        # The project's training ran with the sampled params (a list choice decoded), for the epoch budget.
        assert float(run.data.params["training.learning_rate"]) == pytest.approx(
            frozen.params["training.learning_rate"]
        )
        assert run.data.params["model.filters"] == str(decode_choice(frozen.params["model.filters"]))
        assert (run.data.params["training.epochs"], run.data.metrics["epochs_run"]) == ("2", 2)
        assert run.data.metrics[cfg.objective.metric] == pytest.approx(frozen.value)
    best = opened.best_trial
    for run in children:
        is_best = run.info.run_id == best.user_attrs[study.RUN_ID_ATTR]
        decision = run.data.tags["champion.decision"]
        assert decision == "candidate" if is_best else decision.startswith("skipped (sweep trial")
    # Nothing is registered: a sweep runs branch code, and only promote registers versions (issue 30, High 1).
    assert tracking.search_model_versions(f"name = '{base.registry.model_name}'") == []
    assert tracking.get_run(result.parent_run_id).info.status == "FINISHED"


def test_the_pruner_stops_a_keras_training_after_its_first_epoch(
    tracking: MlflowClient, in_tmp: Path
) -> None:
    base = base_config(in_tmp)
    project = sweep_project(base)
    cfg = sweep_config(
        base, study_name="pruned", parallel=1,
        pruner={"name": "median", "startup_trials": 1, "warmup_epochs": 0}, budget={"epochs_per_trial": 4},
    )  # fmt: skip
    root = str(in_tmp / "sweeps")
    commands.plan(
        cfg, project, root, runners=1
    )  # trial 0, which the test finishes as a far better trial would
    opened = study.open_study(cfg, root)
    for epoch in range(4):
        study.live_trial(opened, 0).report(1.0, step=epoch)
    opened.tell(0, 1.0)
    assert commands.plan(cfg, project, root, runners=1).new == (1,)

    outcome = trial.run_trial(cfg, project, root, 1, checkpoint_root="")

    assert outcome.state == "PRUNED"
    assert list(study.trial_by_number(study.open_study(cfg, root), 1).intermediate_values) == [0]
    # Stopped by model.stop_training after its first epoch: evaluated, exported and FINISHED all the same.
    run = tracking.get_run(outcome.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["epochs_run"] == 1
    assert "test_accuracy" in run.data.metrics


def test_an_interrupted_trial_resumes_from_its_own_s3_checkpoint_in_the_same_run(
    moto_endpoint: str, tracking: MlflowClient, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = "sweep-checkpoints"
    boto3.client("s3").create_bucket(Bucket=bucket)
    for key, value in {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SHA": "cd" * 20,
        "GITHUB_REF_NAME": "sweep/x",
    }.items():
        monkeypatch.setenv(key, value)
    base = base_config(in_tmp, watch_interruptions=True, interruption_poll_seconds=0.2, checkpoint_every=5)
    project = sweep_project(base)
    cfg = sweep_config(base, study_name="spot", trials=1, parallel=1, budget={"epochs_per_trial": 4})
    root = str(in_tmp / "sweeps")
    checkpoints = f"s3://{bucket}/checkpoints"
    commands.plan(cfg, project, root, runners=1)
    params = study.open_study(cfg, root).trials[0].params
    trained = trial_config(base, SEARCH_RULES, cfg, params, checkpoints)
    # The trial's checkpoint, under this session's own prefix and the trial's own scope (TrainHooks).
    prefix = session_prefix(checkpoints, caller_identity(), "sweep/x", "cd" * 20, config_hash(trained.trajectory()),
                            trial.checkpoint_scope(cfg, 0))  # fmt: skip

    with ImdsDouble() as imds:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)

        def notice_after_the_first_backup() -> None:
            deadline = time.monotonic() + 300
            while (S3Checkpoints(prefix, Path()).state() or {}).get("epochs_done", 0) < 1:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            imds.interrupt()

        notifier = threading.Thread(target=notice_after_the_first_backup, daemon=True)
        notifier.start()
        assert commands.trial(cfg, project, root, 0, checkpoints) == EXIT_INTERRUPTED
        notifier.join()
        first_run = (S3Checkpoints(prefix, Path()).state() or {})["run_id"]
        assert commands.collect(cfg, project, root, wave=1).next_wave
        imds.documents.clear()  # the next wave's instance gets no notice
        assert commands.plan(cfg, project, root, runners=1).resumed == (0,)
        outcome = trial.run_trial(cfg, project, root, 0, checkpoints)

    assert outcome.state == "COMPLETE" and outcome.run_id == first_run
    assert sorted({m.step for m in tracking.get_metric_history(first_run, "val_loss")}) == [0, 1, 2, 3]
    assert commands.collect(cfg, project, root, wave=2).finished
