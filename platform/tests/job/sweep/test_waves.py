"""A sweep's waves through its commands (gpu_job.sweep.commands: plan, trial, collect, local) with real Optuna,
real MLflow (the local sqlite store a project's `make sweep` logs to) and the toy project's real training
(toy_project.py): lost and interrupted trials resumed, the budget, the space check, wave claims, the pruner,
the time budget, the cost roll-up and the champion decision of the best trial only."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from collections.abc import Mapping
from pathlib import Path

import boto3
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from gpu_job import study_storage
from gpu_job.errors import EXIT_INTERRUPTED, TrainingInterrupted
from gpu_job.sweep import commands, plan, runs, study, trial
from gpu_job.sweep.project import SweepProject
from gpu_job.sweep.space import SweepConfig, validate_sweep
from gpu_job.sweep.study import SpaceChanged
from gpu_job.train_hooks import TrainHooks

from . import toy_project
from .toy_project import RULES, ToyConfig

COST_RECORD = Path(importlib.util.find_spec("gpu_runner.cost.record").origin)


def toy(tmp: Path, **training: object) -> SweepProject:
    base = ToyConfig.model_validate(
        {
            "training": {"checkpoint_dir": str(tmp / "ckpt"), **training},
            # One model name per test: the store is shared by the module.
            "registry": {"model_name": f"sweep-{tmp.name}"},
        }
    )
    return toy_project.project(base)


def sweep_config(project: SweepProject, **fields: object) -> SweepConfig:
    raw = {
        "study_name": "toy",
        "space": {
            "training.learning_rate": {"type": "float", "low": 0.01, "high": 0.5, "log": True},
            "training.batch_size": {"type": "int", "low": 16, "high": 64, "step": 16},
        },
        "trials": 4,
        "parallel": 2,
        "pruner": {"name": "none"},
        "budget": {"epochs_per_trial": 2},
    }
    raw.update(fields)
    return validate_sweep(raw, project.base, RULES)


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One local store for the module: creating its schema takes ~2 s (MLflow's migrations), a test far less.
    Each test has its own study, parent run and storage root, so they share nothing else."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    # The store's default artifact root is ./mlruns of the directory it was first opened in: the experiment the
    # toy project logs to keeps its artifacts in the test's temporary folder instead.
    artifacts = tmp_path_factory.mktemp("artifacts").as_uri()
    MlflowClient(uri).create_experiment(
        toy_project.ToyConfig().tracking.experiment_name, artifact_location=artifacts
    )
    return uri


@pytest.fixture
def client(sqlite_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_store)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    commands.route_optuna_logs()
    return MlflowClient(sqlite_store)


@pytest.fixture(params=["local", "s3"])
def study_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the study lives: a local folder (make sweep) or s3://<bucket>/sweeps on the moto server (sweep.yml)."""
    if request.param == "local":
        return str(tmp_path / "sweeps")
    request.getfixturevalue("moto_endpoint")
    bucket = f"sweeps-{request.node.name.rsplit('[', 1)[0][-30:].replace('_', '-').lower()}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/sweeps"


def tell_as_the_trial_job_would(
    client: MlflowClient, cfg: SweepConfig, root: str, number: int, value: float
) -> str:
    """A trial's bookkeeping without its training: its child run under the parent, then the study told."""
    opened = study.open_study(cfg, root)
    frozen = study.trial_by_number(opened, number)
    parent = opened.user_attrs[study.PARENT_RUN_ATTR]
    experiment = client.get_run(parent).info.experiment_id
    run = client.create_run(experiment, tags=runs.child_tags(parent, cfg, number, frozen.params))
    client.log_metric(run.info.run_id, cfg.objective.metric, value)
    client.set_terminated(run.info.run_id)
    study.live_trial(opened, number).set_user_attr(study.RUN_ID_ATTR, run.info.run_id)
    opened.tell(number, value)
    return run.info.run_id


def test_the_cost_names_are_the_ones_the_stop_job_logs() -> None:
    """The roll-up reads what gpu_runner.cost.record logs on each trial's run (read as text: the job library
    never imports the launch code)."""
    constants = {
        node.targets[0].id: node.value.value
        for node in ast.parse(COST_RECORD.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    assert (constants["COST_USD"], constants["BILLED_SECONDS"]) == (runs.COST_USD, runs.BILLED_SECONDS)


# ---------------------------------------------------------------------- waves without training
def test_a_lost_trial_is_resumed_in_the_next_wave_then_failed_after_its_last(
    client: MlflowClient, tmp_path: Path, study_root: str
) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project, trials=2, budget={"epochs_per_trial": 1, "max_attempts_per_trial": 2})
    root = study_root

    first = commands.plan(cfg, project, root, runners=2)
    assert (first.wave, first.resumed, first.new) == (1, (), (0, 1))
    tell_as_the_trial_job_would(client, cfg, root, 0, 0.9)
    # Trial 1's job never told anything (its runner was lost).
    collected = commands.collect(cfg, project, root, wave=1)
    assert collected.next_wave and "1 to resume" in collected.why

    # Each leg's attempt is the waves its trial was planned in: the resumed trial's runner, cost and
    # training_seconds are attempt 2 (a new step on the child run), not the first wave's 1 again.
    assert first.matrix() == '{"include":[{"trial":0,"attempt":1},{"trial":1,"attempt":1}]}'
    second = commands.plan(cfg, project, root, runners=2)
    assert (second.wave, second.resumed, second.new) == (2, (1,), ())
    assert second.matrix() == '{"include":[{"trial":1,"attempt":2}]}'
    assert "resumed from their checkpoints: 1 (attempt 2)" in second.summary()
    collected = commands.collect(cfg, project, root, wave=2)
    assert collected.finished
    lost = study.trial_by_number(study.open_study(cfg, root), 1)
    assert lost.state == TrialState.FAIL
    assert lost.user_attrs[study.FAILURE_ATTR].startswith("no result after 2 wave(s)")
    assert client.get_run(first.parent_run_id).info.status == "FINISHED"


def test_the_quota_limits_the_wave_and_the_rest_follow_in_the_next(
    client: MlflowClient, tmp_path: Path
) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project, trials=3, parallel=2)
    wave = commands.plan(cfg, project, str(tmp_path / "sweeps"), runners=1)
    assert wave.trials == (0,)
    assert "1 runner(s) of parallel 2: the vCPU quota allows no more" in wave.summary()
    assert wave.matrix() == '{"include":[{"trial":0,"attempt":1}]}'


def test_the_step_outputs_are_what_sweep_yml_reads(
    client: MlflowClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project, trials=2)
    outputs = tmp_path / "github-output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    wave = commands.plan(cfg, project, str(tmp_path / "sweeps"), runners=2)
    written = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert written == {
        "matrix": wave.matrix(),
        "wave": "1",
        "trials": "2",
        "parent-run-id": wave.parent_run_id,
    }


def test_parent_totals_are_the_sum_of_the_children_each_attempt_once(
    client: MlflowClient, tmp_path: Path
) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project, trials=2)
    root = str(tmp_path / "sweeps")
    planned = commands.plan(cfg, project, root, runners=2)
    children = {n: tell_as_the_trial_job_would(client, cfg, root, n, 0.8 + n / 10) for n in planned.trials}
    # What the stop job logs on each trial's run (gpu_runner.cost.record): per attempt (step), and a retried
    # write leaves a second point at the same step, which counts once.
    for step, cost, seconds in ((1, 0.25, 900), (1, 0.25, 900), (2, 0.5, 1800)):
        client.log_metric(children[0], runs.COST_USD, cost, step=step)
        client.log_metric(children[0], runs.BILLED_SECONDS, seconds, step=step)
    client.log_metric(children[1], runs.COST_USD, 0.125, step=1)
    client.log_metric(children[1], runs.BILLED_SECONDS, 450, step=1)
    # A second child run of trial 1 (as a release that opened a new run for a trial lost before its first
    # checkpoint left): its cost is in the parent's total, and in trial 1's row too.
    experiment = client.get_run(planned.parent_run_id).info.experiment_id
    older = client.create_run(experiment, tags=runs.child_tags(planned.parent_run_id, cfg, 1, {})).info.run_id
    client.log_metric(older, runs.COST_USD, 0.0625, step=1)
    client.log_metric(older, runs.BILLED_SECONDS, 225, step=1)

    collected = commands.collect(cfg, project, root, wave=1)

    parent = client.get_run(planned.parent_run_id)
    assert parent.data.metrics["sweep_cost_usd"] == pytest.approx(0.25 + 0.5 + 0.125 + 0.0625)
    assert parent.data.metrics["sweep_gpu_hours"] == pytest.approx((900 + 1800 + 450 + 225) / 3600)
    # The parent's own sum is under its own name: the cost report sums every run's cost_usd.
    assert runs.COST_USD not in parent.data.metrics
    assert parent.data.tags["sweep.best_trial"] == "1"
    assert collected.best is not None and collected.best.trial == 1
    assert [r.cost_usd for r in collected.rows] == [pytest.approx(0.75), pytest.approx(0.125 + 0.0625)]
    artifacts = {a.path for a in client.list_artifacts(planned.parent_run_id, "plots")}
    assert artifacts == {"plots/optimization_history.png", "plots/parallel_coordinates.png"}


def test_the_last_point_of_a_grid_is_told_like_any_other(client: MlflowClient, tmp_path: Path) -> None:
    """Optuna's GridSampler stops its study once the grid is used up, which raises outside study.optimize:
    the jobs that tell must not carry it."""
    project = toy(tmp_path)
    grid = {"training.batch_size": {"type": "int", "low": 16, "high": 32, "step": 16}}
    cfg = sweep_config(project, sampler={"name": "grid"}, space=grid, trials=2)
    root = str(tmp_path / "sweeps")
    planned = commands.plan(cfg, project, root, runners=2)
    for number in planned.trials:
        tell_as_the_trial_job_would(client, cfg, root, number, 0.5 + number / 10)
    opened = study.open_study(cfg, root)
    assert sorted(t.params["training.batch_size"] for t in opened.trials) == [16, 32]
    assert [t.state for t in opened.trials] == [TrialState.COMPLETE] * 2
    assert commands.collect(cfg, project, root, wave=1).finished


def test_a_spent_budget_stops_the_plan_before_it_asks_or_claims(client: MlflowClient, tmp_path: Path) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project, trials=4, budget={"usd": 1.0})
    root = str(tmp_path / "sweeps")
    planned = commands.plan(cfg, project, root, runners=2)
    run = tell_as_the_trial_job_would(client, cfg, root, 0, 0.9)
    client.log_metric(run, runs.COST_USD, 1.5, step=1)
    assert commands.collect(cfg, project, root, wave=1).finished

    with pytest.raises(plan.BudgetSpent) as refused:
        commands.plan(cfg, project, root, runners=2)
    assert str(refused.value) == (
        "budget.usd: $1.50 of $1.00 spent by 1 trial run(s): nothing launched. Raise the budget in "
        "configs/sweep.yaml or end the sweep."
    )
    uri = study.storage_uri(root, cfg.study_name)
    assert study_storage.latest_wave(uri) == planned.wave
    assert len(study.open_study(cfg, root).trials) == len(planned.trials)


def test_a_changed_space_is_refused_before_anything_is_asked(client: MlflowClient, tmp_path: Path) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project)
    root = str(tmp_path / "sweeps")
    commands.plan(cfg, project, root, runners=2)
    changed = sweep_config(
        project, space={"training.learning_rate": {"type": "float", "low": 0.01, "high": 0.9, "log": True}}
    )
    with pytest.raises(SpaceChanged) as refused:
        commands.plan(changed, project, root, runners=2)
    message = str(refused.value)
    assert "space.training.batch_size: removed" in message
    assert 'space.training.learning_rate: changed from {"type": "float", "low": 0.01, "high": 0.5,' in message
    assert message.endswith(
        "Restore the space in configs/sweep.yaml, or give the new one its own study_name."
    )
    assert study_storage.latest_wave(study.storage_uri(root, cfg.study_name)) == 1
    assert len(study.open_study(cfg, root).trials) == 2


def test_a_changed_direction_is_refused(client: MlflowClient, tmp_path: Path) -> None:
    project = toy(tmp_path)
    root = str(tmp_path / "sweeps")
    commands.plan(sweep_config(project), project, root, runners=2)
    other_way = sweep_config(project, objective={"metric": "best_val_loss", "direction": "minimize"})
    with pytest.raises(
        SpaceChanged, match=r"objective.direction: the study .toy. .* was started to maximize"
    ):
        commands.plan(other_way, project, root, runners=2)


def test_two_plan_jobs_cannot_plan_the_same_wave(
    client: MlflowClient, tmp_path: Path, study_root: str
) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project)
    commands.plan(cfg, project, study_root, runners=2, wave=1)
    # The second job was dispatched for wave 1 too (a push and a dispatch at once): refused, nothing asked.
    with pytest.raises(plan.WaveOutOfOrder) as refused:
        commands.plan(cfg, project, study_root, runners=2, wave=1)
    assert "--wave: wave 1 cannot be planned" in str(refused.value)
    assert len(study.open_study(cfg, study_root).trials) == 2


def test_a_forged_run_id_in_the_study_is_not_continued(
    client: MlflowClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Trial jobs may write the study: one that names another run (here a champion's, outside the sweep) must not
    # make the next wave's trial log into it.
    project = toy(tmp_path)
    cfg = sweep_config(project, study_name="forged-run", trials=2, parallel=2)
    root = str(tmp_path / "sweeps")
    commands.plan(cfg, project, root, runners=2)
    parent = study.open_study(cfg, root).user_attrs[study.PARENT_RUN_ATTR]
    experiment = client.get_run(parent).info.experiment_id
    outsider = client.create_run(experiment, tags={"role": "champion"}).info.run_id
    other_trial = tell_as_the_trial_job_would(client, cfg, root, 1, 0.5)

    for forged, why in ((outsider, "not this trial's child run"), (other_trial, "not this trial's child run"),
                        ("../../etc", "not readable")):  # fmt: skip
        assert trial._own_child_run(forged, parent, 0) is None
        assert why in capsys.readouterr().out
    own = client.create_run(experiment, tags=runs.child_tags(parent, cfg, 0, {})).info.run_id
    assert trial._own_child_run(own, parent, 0) == own


# ---------------------------------------------------------------------- waves that train (the toy training)
def test_a_local_sweep_of_four_trials_in_two_waves(client: MlflowClient, tmp_path: Path) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project)
    root = str(tmp_path / "sweeps")

    result = commands.local(cfg, project, root)

    opened = study.open_study(cfg, root)
    assert [t.state for t in opened.trials] == [TrialState.COMPLETE] * 4
    assert [study.waves_of(t) for t in opened.trials] == [[1], [1], [2], [2]]
    parent = client.get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED"
    children = runs.children(client, result.parent_run_id)
    assert sorted(int(r.data.tags[runs.TRIAL_TAG]) for r in children) == [0, 1, 2, 3]
    for run in children:
        number = int(run.data.tags[runs.TRIAL_TAG])
        frozen = study.trial_by_number(opened, number)
        # The child run trained with the sampled params, for the epoch budget, in its own checkpoint scope and
        # folder, and its objective is the study's.
        assert float(run.data.params["training.learning_rate"]) == pytest.approx(
            frozen.params["training.learning_rate"]
        )
        assert run.data.params["training.batch_size"] == str(frozen.params["training.batch_size"])
        assert run.data.params["training.epochs"] == "2"
        assert run.data.params["training.checkpoint_dir"] == str(
            tmp_path / "ckpt" / "toy" / f"trial-{number}"
        )
        assert run.data.tags["checkpoint.scope"] == f"sweeps/toy/trial-{number}"
        assert run.data.metrics[cfg.objective.metric] == pytest.approx(frozen.value)
        assert run.info.run_name == f"toy trial {number}"
    best = opened.best_trial
    for run in children:
        # Only the best trial is compared with the champion (a candidate: promote.yml measures and serves).
        is_best = run.info.run_id == best.user_attrs[study.RUN_ID_ATTR]
        decision = run.data.tags["champion.decision"]
        assert decision == "candidate" if is_best else decision.startswith("skipped (sweep trial")
    assert parent.data.tags["sweep.best_trial"] == str(best.number)
    assert parent.data.metrics[f"best_{cfg.objective.metric}"] == pytest.approx(best.value)
    # Nothing is registered: a sweep runs branch code, and only promote registers versions (issue 30, High 1).
    assert client.search_model_versions(f"name = '{project.base.registry.model_name}'") == []
    assert parent.data.tags["sweep.best_decision"] == "candidate"
    summary = commands.sweep_collect.summary(result, cfg, "sqlite:///x", parent.info.experiment_id)
    assert f"**Best trial {best.number}**: best_val_accuracy" in summary


def test_a_project_without_a_champion_rule_ends_the_sweep_without_a_decision(
    client: MlflowClient, tmp_path: Path
) -> None:
    project = dataclasses.replace(toy(tmp_path), champion=None)
    cfg = sweep_config(project, trials=1, parallel=1)
    result = commands.local(cfg, project, str(tmp_path / "sweeps"))
    parent = client.get_run(result.parent_run_id)
    assert (result.decision, parent.info.status) == (None, "FINISHED")
    assert "sweep.best_decision" not in parent.data.tags


def test_the_pruner_stops_a_trial_worse_than_the_others(client: MlflowClient, tmp_path: Path) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(
        project, study_name="pruned", trials=2, parallel=1,
        pruner={"name": "median", "startup_trials": 1, "warmup_epochs": 0}, budget={"epochs_per_trial": 4},
    )  # fmt: skip
    root = str(tmp_path / "sweeps")
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
    pruned = study.trial_by_number(study.open_study(cfg, root), 1)
    assert pruned.state == TrialState.PRUNED
    # Stopped after its first epoch, and its run is complete all the same (evaluated, FINISHED).
    assert list(pruned.intermediate_values) == [0]
    run = client.get_run(outcome.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["epochs_run"] == 1


def test_a_trial_out_of_time_stops_after_the_epoch_that_passes_its_minutes(
    client: MlflowClient, tmp_path: Path
) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project, trials=1, parallel=1, budget={"epochs_per_trial": 4, "minutes_per_trial": 1})
    root = str(tmp_path / "sweeps")
    commands.plan(cfg, project, root, runners=1)
    # A clock on which every epoch takes 25 s: the third epoch ends past the trial's minute.
    ticks = iter(range(0, 1000, 25))

    outcome = trial.run_trial(cfg, project, root, 0, checkpoint_root="", clock=lambda: next(ticks))

    done = study.trial_by_number(study.open_study(cfg, root), 0)
    assert (outcome.state, done.state) == ("COMPLETE", TrialState.COMPLETE)
    assert done.user_attrs["sweep.stopped_by"] == "budget.minutes_per_trial after epoch 2"
    assert client.get_run(outcome.run_id).data.metrics["epochs_run"] == 3


def test_a_failing_training_fails_its_trial_with_the_reason(client: MlflowClient, tmp_path: Path) -> None:
    project = toy(tmp_path)
    space = {"data.source": {"type": "categorical", "choices": ["no-such-folder"]}}
    cfg = sweep_config(project, study_name="failing", trials=1, parallel=1, space=space)
    root = str(tmp_path / "sweeps")
    commands.plan(cfg, project, root, runners=1)
    with pytest.raises(toy_project.DataError):
        commands.trial(cfg, project, root, 0, checkpoint_root="")
    failed = study.trial_by_number(study.open_study(cfg, root), 0)
    assert failed.state == TrialState.FAIL
    assert (
        failed.user_attrs[study.FAILURE_ATTR]
        == "DataError: data.source: 'no-such-folder' does not exist; use blobs"
    )
    # A re-run of the same job trains nothing more: the study has the result.
    assert trial.run_trial(cfg, project, root, 0, checkpoint_root="").state == "SKIPPED"


def interrupted_after(epochs: int, project: SweepProject) -> SweepProject:
    """The project's training, stopped by a spot notice once `epochs` epochs are backed up (as its watcher
    raises TrainingInterrupted between batches, after the checkpoint)."""

    def train(cfg: ToyConfig, hooks: TrainHooks):
        def on_epoch(epoch: int, logs: Mapping[str, float]) -> bool:
            stop = hooks.on_epoch(epoch, logs) if hooks.on_epoch else False
            if epoch + 1 == epochs:
                raise TrainingInterrupted({"action": "terminate", "time": "2026-12-07T23:00:00Z"}, epochs)
            return stop

        return toy_project.train(cfg, dataclasses.replace(hooks, on_epoch=on_epoch))

    return dataclasses.replace(project, train=train)


def test_an_interrupted_trial_resumes_in_the_next_wave_in_the_same_run(
    client: MlflowClient, tmp_path: Path
) -> None:
    project = toy(tmp_path)
    cfg = sweep_config(project, study_name="spot", trials=1, parallel=1, budget={"epochs_per_trial": 4})
    root = str(tmp_path / "sweeps")
    commands.plan(cfg, project, root, runners=1)

    assert commands.trial(cfg, interrupted_after(1, project), root, 0, checkpoint_root="") == EXIT_INTERRUPTED

    stopped = study.trial_by_number(study.open_study(cfg, root), 0)
    assert stopped.state == TrialState.RUNNING and stopped.user_attrs[study.INTERRUPTED_ATTR] is True
    first_run = stopped.user_attrs[study.RUN_ID_ATTR]
    assert commands.collect(cfg, project, root, wave=1).next_wave
    wave = commands.plan(cfg, project, root, runners=1)
    assert (wave.resumed, wave.new, wave.attempts) == ((0,), (), {0: 2})

    outcome = trial.run_trial(cfg, project, root, 0, checkpoint_root="")

    assert outcome.state == "COMPLETE" and outcome.run_id == first_run
    assert [r.info.run_id for r in runs.children(client, wave.parent_run_id)] == [first_run]
    # Resumed from the backup: epochs 1-3 trained in the second attempt, each epoch logged once.
    assert client.get_run(first_run).data.tags["resumed.from_epoch"] == "1"
    assert sorted(m.step for m in client.get_metric_history(first_run, "val_loss")) == [0, 1, 2, 3]
    final = commands.collect(cfg, project, root, wave=2)
    assert final.finished and final.best is not None and final.best.run_id == first_run
    done = study.trial_by_number(study.open_study(cfg, root), 0)
    assert (done.user_attrs[study.ATTEMPTS_ATTR], done.user_attrs[study.INTERRUPTED_ATTR]) == (2, False)


def test_a_trial_lost_before_its_first_checkpoint_resumes_in_its_own_child_run(
    client: MlflowClient, tmp_path: Path
) -> None:
    # Cancelled (SIGINT: KeyboardInterrupt) or its instance lost while the first epoch runs: no checkpoint, but
    # its child run is open, and the stop job bills that attempt to it. The next wave trains again in that run.
    project = toy(tmp_path)
    cfg = sweep_config(project, study_name="lost-early", trials=1, parallel=1, budget={"epochs_per_trial": 2})
    root = str(tmp_path / "sweeps")
    wave = commands.plan(cfg, project, root, runners=1)

    def lost_in_the_first_epoch(cfg: ToyConfig, hooks: TrainHooks):
        def on_epoch(epoch: int, logs: Mapping[str, float]) -> bool:
            (
                Path(cfg.training.checkpoint_dir) / toy_project.BACKUP
            ).unlink()  # the backup never left the instance
            raise KeyboardInterrupt

        return toy_project.train(cfg, dataclasses.replace(hooks, on_epoch=on_epoch))

    with pytest.raises(KeyboardInterrupt):
        trial.run_trial(
            cfg, dataclasses.replace(project, train=lost_in_the_first_epoch), root, 0, checkpoint_root=""
        )
    lost = study.trial_by_number(study.open_study(cfg, root), 0)
    first_run = lost.user_attrs[study.RUN_ID_ATTR]  # recorded as soon as the run was open
    assert lost.state == TrialState.RUNNING
    assert commands.collect(cfg, project, root, wave=1).next_wave
    assert commands.plan(cfg, project, root, runners=1).resumed == (0,)

    outcome = trial.run_trial(cfg, project, root, 0, checkpoint_root="")

    assert outcome.state == "COMPLETE" and outcome.run_id == first_run
    assert [r.info.run_id for r in runs.children(client, wave.parent_run_id)] == [first_run]
    run = client.get_run(first_run)
    assert run.info.status == "FINISHED" and run.data.metrics["epochs_run"] == 2
    assert run.data.tags["resumed.from_epoch"] == "0"
