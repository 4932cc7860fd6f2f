"""The sweep's plan, trial and collect jobs with real Optuna, real MLflow and real training on the digits.

The waves without training (lost trials, budget, space, wave claims, cost roll-up) run against a local sqlite
MLflow store; the ones that train (a whole local sweep, a pruned trial, an interrupted trial resumed from its S3
checkpoint) against the MLflow server and the moto server.
"""

from __future__ import annotations

import ast
import importlib.util
import threading
import time
from pathlib import Path

import boto3
import pytest
from gpu_job import study_storage
from gpu_job.checkpoints import (
    S3Checkpoints,
    caller_identity,
    config_hash,
    session_prefix,
)
from gpu_runner_testing.imds_double import ImdsDouble
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from {{ cookiecutter.package_name }} import (
    sweep,
    sweep_plan,
    sweep_runs,
    sweep_study,
    sweep_trial,
    train,
)
from {{ cookiecutter.package_name }}.config import Config, config_from_dict
from {{ cookiecutter.package_name }}.errors import TrainingInterrupted
from {{ cookiecutter.package_name }}.sweep_config import SweepConfig, trial_config, validate_sweep
from {{ cookiecutter.package_name }}.sweep_study import SpaceChanged
from {{ cookiecutter.package_name }}.sweep_trial import checkpoint_scope, run_trial

EXPERIMENT = "sweep-tests"
# The installed platform's source (gpu-runner, a git dependency): found without importing it.
COST_RECORD = Path(importlib.util.find_spec("gpu_runner.cost.record").origin)


def base_config(tmp: Path, **training: object) -> Config:
    return config_from_dict(
        {
            "training": {"checkpoint_dir": str(tmp / "ckpt"), "early_stopping_patience": 50, **training},
            "export": {"output_dir": str(tmp / "out"), "tflite": False, "tflite_int8": False},
            "tracking": {"experiment_name": EXPERIMENT, "log_system_metrics": False},
            # One model name per test: the tracking server is shared by the session, and every sweep that
            # finishes registers its best trial, so a shared name would hold other tests' versions.
            "registry": {"model_name": f"sweep-{tmp.name}"},
        }
    )


def sweep_config(base: Config, **fields: object) -> SweepConfig:
    raw = {
        "study_name": "digits",
        "space": {
            "training.learning_rate": {"type": "float", "low": 0.001, "high": 0.01, "log": True},
            "model.dense_units": {"type": "int", "low": 16, "high": 64, "step": 16},
        },
        "trials": 4,
        "parallel": 2,
        "pruner": {"name": "none"},
        "budget": {"epochs_per_trial": 2},
    }
    raw.update(fields)
    return validate_sweep(raw, base)


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One local store for the module: creating its schema takes ~2 s (MLflow's migrations), a test far less.
    Each test has its own study, parent run and storage root, so they share nothing else."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()
    return uri


@pytest.fixture
def local_mlflow(sqlite_store: str, in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_store)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return MlflowClient(sqlite_store)


@pytest.fixture(params=["local", "s3"])
def study_root(request: pytest.FixtureRequest, in_tmp: Path) -> str:
    """Where the study lives: a local folder (make sweep) or s3://<bucket>/sweeps on the moto server (sweep.yml)."""
    if request.param == "local":
        return str(in_tmp / "sweeps")
    request.getfixturevalue("moto_endpoint")
    bucket = f"sweeps-{request.node.name.rsplit('[', 1)[0][-30:].replace('_', '-').lower()}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/sweeps"


def tell_as_the_trial_job_would(
    client: MlflowClient, cfg: SweepConfig, root: str, number: int, value: float
) -> str:
    """A trial's bookkeeping without its training: its child run under the parent, then the study told."""
    study = sweep_study.open_study(cfg, root)
    trial = sweep_study.trial_by_number(study, number)
    parent = study.user_attrs[sweep_study.PARENT_RUN_ATTR]
    experiment = client.get_run(parent).info.experiment_id
    run = client.create_run(experiment, tags=sweep_runs.child_tags(parent, cfg, number, trial.params))
    client.log_metric(run.info.run_id, cfg.objective.metric, value)
    client.set_terminated(run.info.run_id)
    sweep_study.live_trial(study, number).set_user_attr(sweep_study.RUN_ID_ATTR, run.info.run_id)
    study.tell(number, value)
    return run.info.run_id


def test_the_cost_names_are_the_ones_the_stop_job_logs() -> None:
    """The roll-up reads what gpu_runner.cost.record logs on each trial's run (read as text: the training side
    does not import the runner)."""
    constants = {
        node.targets[0].id: node.value.value
        for node in ast.parse(COST_RECORD.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    assert (constants["COST_USD"], constants["BILLED_SECONDS"]) == (
        sweep_runs.COST_USD,
        sweep_runs.BILLED_SECONDS,
    )


# ---------------------------------------------------------------------- waves without training
def test_a_lost_trial_is_resumed_in_the_next_wave_then_failed_after_its_last(
    local_mlflow: MlflowClient, in_tmp: Path, study_root: str
) -> None:
    base = base_config(in_tmp)
    cfg = sweep_config(base, trials=2, budget={"epochs_per_trial": 1, "max_attempts_per_trial": 2})
    root = study_root

    first = sweep.plan(cfg, base, root, runners=2)
    assert (first.wave, first.resumed, first.new) == (1, (), (0, 1))
    tell_as_the_trial_job_would(local_mlflow, cfg, root, 0, 0.9)
    # Trial 1's job never told anything (its runner was lost).
    collected = sweep.collect(cfg, base, root, wave=1)
    assert collected.next_wave and "1 to resume" in collected.why

    # Each leg's attempt is the waves its trial was planned in: the resumed trial's runner, cost and
    # training_seconds are attempt 2 (a new step on the child run), not the first wave's 1 again.
    assert first.matrix() == '{"include":[{"trial":0,"attempt":1},{"trial":1,"attempt":1}]}'
    second = sweep.plan(cfg, base, root, runners=2)
    assert (second.wave, second.resumed, second.new) == (2, (1,), ())
    assert second.matrix() == '{"include":[{"trial":1,"attempt":2}]}'
    assert "resumed from their checkpoints: 1 (attempt 2)" in second.summary()
    collected = sweep.collect(cfg, base, root, wave=2)
    assert collected.finished
    study = sweep_study.open_study(cfg, root)
    lost = sweep_study.trial_by_number(study, 1)
    assert lost.state == TrialState.FAIL
    assert lost.user_attrs[sweep_study.FAILURE_ATTR].startswith("no result after 2 wave(s)")
    assert local_mlflow.get_run(first.parent_run_id).info.status == "FINISHED"


def test_the_quota_limits_the_wave_and_the_rest_follow_in_the_next(
    local_mlflow: MlflowClient, in_tmp: Path
) -> None:
    base = base_config(in_tmp)
    cfg = sweep_config(base, trials=3, parallel=2)
    root = str(in_tmp / "sweeps")
    wave = sweep.plan(cfg, base, root, runners=1)
    assert wave.trials == (0,)
    assert "1 runner(s) of parallel 2: the vCPU quota allows no more" in wave.summary()
    assert wave.matrix() == '{"include":[{"trial":0,"attempt":1}]}'


def test_parent_totals_are_the_sum_of_the_children_each_attempt_once(
    local_mlflow: MlflowClient, in_tmp: Path
) -> None:
    base = base_config(in_tmp)
    cfg = sweep_config(base, trials=2)
    root = str(in_tmp / "sweeps")
    plan = sweep.plan(cfg, base, root, runners=2)
    runs = {n: tell_as_the_trial_job_would(local_mlflow, cfg, root, n, 0.8 + n / 10) for n in plan.trials}
    # What the stop job logs on each trial's run (gpu_runner.cost.record): per attempt (step), and a retried
    # write leaves a second point at the same step, which counts once.
    for step, cost, seconds in ((1, 0.25, 900), (1, 0.25, 900), (2, 0.5, 1800)):
        local_mlflow.log_metric(runs[0], sweep_runs.COST_USD, cost, step=step)
        local_mlflow.log_metric(runs[0], sweep_runs.BILLED_SECONDS, seconds, step=step)
    local_mlflow.log_metric(runs[1], sweep_runs.COST_USD, 0.125, step=1)
    local_mlflow.log_metric(runs[1], sweep_runs.BILLED_SECONDS, 450, step=1)
    # A second child run of trial 1 (as a release that opened a new run for a trial lost before its first
    # checkpoint left): its cost is in the parent's total, and in trial 1's row too.
    experiment = local_mlflow.get_run(plan.parent_run_id).info.experiment_id
    tags = sweep_runs.child_tags(plan.parent_run_id, cfg, 1, {})
    older = local_mlflow.create_run(experiment, tags=tags).info.run_id
    local_mlflow.log_metric(older, sweep_runs.COST_USD, 0.0625, step=1)
    local_mlflow.log_metric(older, sweep_runs.BILLED_SECONDS, 225, step=1)

    collected = sweep.collect(cfg, base, root, wave=1)

    parent = local_mlflow.get_run(plan.parent_run_id)
    assert parent.data.metrics["sweep_cost_usd"] == pytest.approx(0.25 + 0.5 + 0.125 + 0.0625)
    assert parent.data.metrics["sweep_gpu_hours"] == pytest.approx((900 + 1800 + 450 + 225) / 3600)
    # The parent's own sum is under its own name: the cost report sums every run's cost_usd.
    assert sweep_runs.COST_USD not in parent.data.metrics
    assert parent.data.tags["sweep.best_trial"] == "1"
    assert collected.best is not None and collected.best.trial == 1
    assert [r.cost_usd for r in collected.rows] == [pytest.approx(0.75), pytest.approx(0.125 + 0.0625)]
    artifacts = {a.path for a in local_mlflow.list_artifacts(plan.parent_run_id, "plots")}
    assert artifacts == {"plots/optimization_history.png", "plots/parallel_coordinates.png"}


def test_the_last_point_of_a_grid_is_told_like_any_other(local_mlflow: MlflowClient, in_tmp: Path) -> None:
    """Optuna's GridSampler stops its study once the grid is used up, which raises outside study.optimize:
    the jobs that tell must not carry it."""
    base = base_config(in_tmp)
    grid = {"model.dense_units": {"type": "int", "low": 16, "high": 32, "step": 16}}
    cfg = sweep_config(base, sampler={"name": "grid"}, space=grid, trials=2)
    root = str(in_tmp / "sweeps")
    plan = sweep.plan(cfg, base, root, runners=2)
    for number in plan.trials:
        tell_as_the_trial_job_would(local_mlflow, cfg, root, number, 0.5 + number / 10)
    study = sweep_study.open_study(cfg, root)
    assert sorted(t.params["model.dense_units"] for t in study.trials) == [16, 32]
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    assert sweep.collect(cfg, base, root, wave=1).finished


def test_a_spent_budget_stops_the_plan_before_it_asks_or_claims(
    local_mlflow: MlflowClient, in_tmp: Path
) -> None:
    base = base_config(in_tmp)
    cfg = sweep_config(base, trials=4, budget={"usd": 1.0})
    root = str(in_tmp / "sweeps")
    plan = sweep.plan(cfg, base, root, runners=2)
    run = tell_as_the_trial_job_would(local_mlflow, cfg, root, 0, 0.9)
    local_mlflow.log_metric(run, sweep_runs.COST_USD, 1.5, step=1)
    assert sweep.collect(cfg, base, root, wave=1).finished

    with pytest.raises(sweep_plan.BudgetSpent) as refused:
        sweep.plan(cfg, base, root, runners=2)
    assert str(refused.value) == (
        "budget.usd: $1.50 of $1.00 spent by 1 trial run(s): nothing launched. Raise the budget in "
        "configs/sweep.yaml or end the sweep."
    )
    uri = sweep_study.storage_uri(root, cfg.study_name)
    assert study_storage.latest_wave(uri) == plan.wave
    assert len(sweep_study.open_study(cfg, root).trials) == len(plan.trials)


def test_a_changed_space_is_refused_before_anything_is_asked(
    local_mlflow: MlflowClient, in_tmp: Path
) -> None:
    base = base_config(in_tmp)
    cfg = sweep_config(base)
    root = str(in_tmp / "sweeps")
    sweep.plan(cfg, base, root, runners=2)
    changed = sweep_config(
        base, space={"training.learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}}
    )
    with pytest.raises(SpaceChanged) as refused:
        sweep.plan(changed, base, root, runners=2)
    message = str(refused.value)
    assert "space.model.dense_units: removed" in message
    assert (
        'space.training.learning_rate: changed from {"type": "float", "low": 0.001, "high": 0.01,' in message
    )
    assert message.endswith(
        "Restore the space in configs/sweep.yaml, or give the new one its own study_name."
    )
    uri = sweep_study.storage_uri(root, cfg.study_name)
    assert study_storage.latest_wave(uri) == 1
    assert len(sweep_study.open_study(cfg, root).trials) == 2


def test_two_plan_jobs_cannot_plan_the_same_wave(
    local_mlflow: MlflowClient, in_tmp: Path, study_root: str
) -> None:
    base = base_config(in_tmp)
    cfg = sweep_config(base)
    root = study_root
    sweep.plan(cfg, base, root, runners=2, wave=1)
    # The second job was dispatched for wave 1 too (a push and a dispatch at once): refused, nothing asked.
    with pytest.raises(sweep_plan.WaveOutOfOrder) as refused:
        sweep.plan(cfg, base, root, runners=2, wave=1)
    assert "--wave: wave 1 cannot be planned" in str(refused.value)
    assert len(sweep_study.open_study(cfg, root).trials) == 2


# ---------------------------------------------------------------------- waves that train
@pytest.mark.slow
def test_a_local_sweep_of_four_trials_in_two_waves(mlflow_server: str, in_tmp: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    base = base_config(in_tmp)
    cfg = sweep_config(base)
    root = str(in_tmp / "sweeps")

    result = sweep.local(cfg, base, root)

    client = MlflowClient(mlflow_server)
    study = sweep_study.open_study(cfg, root)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4
    assert [sweep_study.waves_of(t) for t in study.trials] == [[1], [1], [2], [2]]
    parent = client.get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED"
    children = sweep_runs.children(client, result.parent_run_id)
    assert sorted(int(r.data.tags[sweep_runs.TRIAL_TAG]) for r in children) == [0, 1, 2, 3]
    for run in children:
        trial = sweep_study.trial_by_number(study, int(run.data.tags[sweep_runs.TRIAL_TAG]))
        # The child run trained with the sampled params, for the epoch budget, and its objective is the study's.
        assert float(run.data.params["training.learning_rate"]) == pytest.approx(
            trial.params["training.learning_rate"]
        )
        assert run.data.params["model.dense_units"] == str(trial.params["model.dense_units"])
        assert run.data.params["training.epochs"] == "2"
        assert run.data.metrics[cfg.objective.metric] == pytest.approx(trial.value)
    best = study.best_trial
    for run in children:
        # Only the best trial is compared with the champion (a candidate: promote.yml measures and serves).
        is_best = run.info.run_id == best.user_attrs[sweep_study.RUN_ID_ATTR]
        decision = run.data.tags["champion.decision"]
        assert decision == "candidate" if is_best else decision.startswith("skipped (sweep trial")
    assert parent.data.tags["sweep.best_trial"] == str(best.number)
    assert parent.data.metrics[f"best_{cfg.objective.metric}"] == pytest.approx(best.value)
    # Nothing is registered: a sweep runs branch code, and only promote registers versions (issue 30, High 1).
    assert client.search_model_versions(f"name = '{base.registry.model_name}'") == []
    assert parent.data.tags["sweep.best_decision"] == "candidate"
    assert "**Best trial" in sweep.sweep_collect.summary(
        result, cfg, mlflow_server, parent.info.experiment_id
    )


@pytest.mark.slow
def test_the_pruner_stops_a_trial_worse_than_the_others(
    mlflow_server: str, in_tmp: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    base = base_config(in_tmp)
    cfg = sweep_config(
        base, study_name="pruned", trials=2, parallel=1, pruner={"name": "median", "startup_trials": 1, "warmup_epochs": 0},
        budget={"epochs_per_trial": 4},
    )  # fmt: skip
    root = str(in_tmp / "sweeps")
    sweep.plan(cfg, base, root, runners=1)  # trial 0, which the test finishes as a far better trial would
    study = sweep_study.open_study(cfg, root)
    for epoch in range(4):
        sweep_study.live_trial(study, 0).report(1.0, step=epoch)
    study.tell(0, 1.0)
    wave = sweep.plan(cfg, base, root, runners=1)
    assert wave.new == (1,)

    outcome = run_trial(cfg, base, root, 1, checkpoint_root="")

    assert outcome.state == "PRUNED"
    trial = sweep_study.trial_by_number(sweep_study.open_study(cfg, root), 1)
    assert trial.state == TrialState.PRUNED
    # Stopped after its first epoch, and its run is complete all the same (evaluated, FINISHED).
    assert list(trial.intermediate_values) == [0]
    run = MlflowClient(mlflow_server).get_run(outcome.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["epochs_run"] == 1


@pytest.mark.slow
def test_an_interrupted_trial_resumes_in_the_next_wave_in_the_same_run(
    moto_endpoint: str, mlflow_server: str, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = "sweep-checkpoints"
    boto3.client("s3").create_bucket(Bucket=bucket)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    for key, value in {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SHA": "cd" * 20,
        "GITHUB_REF_NAME": "sweep/x",
    }.items():
        monkeypatch.setenv(key, value)
    base = base_config(in_tmp, watch_interruptions=True, interruption_poll_seconds=0.2, checkpoint_every=5)
    cfg = sweep_config(base, study_name="spot", trials=1, parallel=1, budget={"epochs_per_trial": 4})
    root = str(in_tmp / "sweeps")
    checkpoints = f"s3://{bucket}/checkpoints"
    sweep.plan(cfg, base, root, runners=1)
    study = sweep_study.open_study(cfg, root)
    trained = trial_config(base, cfg, study.trials[0].params, checkpoints)
    # The trial's checkpoint, under this session's own prefix (the same session for both waves here).
    prefix = session_prefix(checkpoints, caller_identity(), "sweep/x", "cd" * 20, config_hash(trained.trajectory()),
                            checkpoint_scope(cfg, 0))  # fmt: skip

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
        with pytest.raises(TrainingInterrupted):
            run_trial(cfg, base, root, 0, checkpoints)
        notifier.join()
        stopped = sweep_study.trial_by_number(sweep_study.open_study(cfg, root), 0)
        assert (
            stopped.state == TrialState.RUNNING and stopped.user_attrs[sweep_study.INTERRUPTED_ATTR] is True
        )
        first_run = (S3Checkpoints(prefix, Path()).state() or {})["run_id"]
        assert sweep.collect(cfg, base, root, wave=1).next_wave

        imds.documents.clear()  # the next wave's instance gets no notice
        wave = sweep.plan(cfg, base, root, runners=1)
        assert wave.resumed == (0,) and wave.new == ()
        outcome = run_trial(cfg, base, root, 0, checkpoints)

    assert outcome.state == "COMPLETE" and outcome.run_id == first_run
    client = MlflowClient(mlflow_server)
    assert [r.info.run_id for r in sweep_runs.children(client, wave.parent_run_id)] == [first_run]
    assert sorted({m.step for m in client.get_metric_history(first_run, "val_loss")}) == [0, 1, 2, 3]
    final = sweep.collect(cfg, base, root, wave=2)
    assert final.finished and final.best is not None and final.best.run_id == first_run
    assert (
        sweep_study.trial_by_number(sweep_study.open_study(cfg, root), 0).user_attrs[
            sweep_study.ATTEMPTS_ATTR
        ]
        == 2
    )


@pytest.mark.slow
def test_a_trial_lost_before_its_first_checkpoint_resumes_in_its_own_child_run(
    mlflow_server: str, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelled (SIGINT: KeyboardInterrupt) or its instance lost while the first epoch runs: no checkpoint, but
    # its child run is open, and the stop job bills that attempt to it. The next wave trains again in that run.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    base = base_config(in_tmp)
    cfg = sweep_config(base, study_name="lost-early", trials=1, parallel=1, budget={"epochs_per_trial": 2})
    root = str(in_tmp / "sweeps")
    wave = sweep.plan(cfg, base, root, runners=1)

    def lost_in_the_first_epoch(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(train, "_fit", lost_in_the_first_epoch)
        with pytest.raises(KeyboardInterrupt):
            run_trial(cfg, base, root, 0, checkpoint_root="")
    lost = sweep_study.trial_by_number(sweep_study.open_study(cfg, root), 0)
    first_run = lost.user_attrs[sweep_study.RUN_ID_ATTR]  # recorded as soon as the run was open
    assert lost.state == TrialState.RUNNING
    assert sweep.collect(cfg, base, root, wave=1).next_wave
    assert sweep.plan(cfg, base, root, runners=1).resumed == (0,)

    outcome = run_trial(cfg, base, root, 0, checkpoint_root="")

    assert outcome.state == "COMPLETE" and outcome.run_id == first_run
    client = MlflowClient(mlflow_server)
    assert [r.info.run_id for r in sweep_runs.children(client, wave.parent_run_id)] == [first_run]
    run = client.get_run(first_run)
    assert run.info.status == "FINISHED" and run.data.metrics["epochs_run"] == 2
    assert run.data.tags["resumed.from_epoch"] == "0"
    assert run.data.params["training.learning_rate"]  # logged once, by the attempt that got that far


def test_a_forged_run_id_in_the_study_is_not_continued(
    local_mlflow: MlflowClient, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Trial jobs may write the study: one that names another run (here a champion's, outside the sweep) must not
    # make the next wave's trial log into it.
    base = base_config(in_tmp)
    cfg = sweep_config(base, study_name="forged-run", trials=2, parallel=2)
    root = str(in_tmp / "sweeps")
    sweep.plan(cfg, base, root, runners=2)
    study = sweep_study.open_study(cfg, root)
    parent = study.user_attrs[sweep_study.PARENT_RUN_ATTR]
    experiment = local_mlflow.get_run(parent).info.experiment_id
    outsider = local_mlflow.create_run(experiment, tags={"role": "champion"}).info.run_id
    other_trial = tell_as_the_trial_job_would(local_mlflow, cfg, root, 1, 0.5)

    for forged, why in ((outsider, "not this trial's child run"), (other_trial, "not this trial's child run"),
                        ("../../etc", "not readable")):  # fmt: skip
        assert sweep_trial._own_child_run(forged, parent, 0) is None
        assert why in capsys.readouterr().out
    own = local_mlflow.create_run(experiment, tags=sweep_runs.child_tags(parent, cfg, 0, {})).info.run_id
    assert sweep_trial._own_child_run(own, parent, 0) == own
