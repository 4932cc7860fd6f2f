"""`make e2e`: the real sweep.yml (plan -> one sweep-trial.yml leg per trial -> collect -> next wave) under act.

See gpu_runner_testing.story.sweep_story for how the waves are run and .harness for what is real and what is a
double.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_runner_testing.story.harness import LEG, PROJECT
from gpu_runner_testing.story.report import record
from gpu_runner_testing.story.stories import Stack
from gpu_runner_testing.story.sweep_story import (
    ACT_ENDS_RUN,
    SWEEP,
    SweepScenario,
    SweepStory,
    cancel_when_both_train,
    collect_outside_act,
    interrupt_trial_one_in_its_second_epoch,
    overhead,
    run_sweep,
)
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

pytestmark = pytest.mark.e2e
PARENT_TAG = "mlflow.parentRunId"  # MLflow's nesting tag (mlflow.utils.mlflow_tags.MLFLOW_PARENT_RUN_ID)


def _context(story: SweepStory) -> str:
    lines = [f"act logs: {[str(w.run.log) for w in story.waves]}"]
    for wave in story.waves:
        lines.append(f"wave {wave.number} ({wave.event} {wave.inputs}): {wave.run.job_results}")
        lines.append(f"  simulator errors: {wave.simulator.errors}")
    return "\n".join(lines)


def _runs(client: MlflowClient, study: str) -> tuple[Any, list[Any]]:
    """The sweep's parent run (tag sweep.study, no parent) and its children (tag mlflow.parentRunId)."""
    every = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    parents = [r for r in every if r.data.tags.get("sweep.study") == study and PARENT_TAG not in r.data.tags]
    assert len(parents) == 1, [r.data.tags for r in parents]
    parent = parents[0]
    children = [r for r in every if r.data.tags.get(PARENT_TAG) == parent.info.run_id]
    return parent, children


def _summed(client: MlflowClient, run_id: str, key: str) -> float:
    return sum(m.value for m in client.get_metric_history(run_id, key))


def assert_totals(story: SweepStory, client: MlflowClient, children: int | None) -> tuple[Any, list[Any]]:
    """Nothing left behind, and the parent's billed cost is the sum of what the stop jobs logged on the children."""
    context = _context(story)
    assert (story.instances_left, story.runners_left, story.params_left) == (0, 0, 0), context
    for wave in story.waves:
        assert not wave.simulator.errors, context
    parent, kids = _runs(client, story.study_name)
    if children is not None:
        assert len(kids) == children, ([k.data.tags.get("sweep.trial") for k in kids], context)
    costs = [_summed(client, k.info.run_id, "cost_usd") for k in kids]
    assert all(c > 0 for c in costs), (costs, context)  # every stop job priced its instance
    last = client.get_metric_history(parent.info.run_id, "sweep_cost_usd")
    assert max(last, key=lambda m: m.step).value == pytest.approx(sum(costs)), (last, costs)
    return parent, kids


def test_leg_names_match_sweep_yml() -> None:
    """harness.LEG reads a leg's trial number from act's job name: sweep.yml's trial job must keep that name."""
    jobs = yaml.safe_load((PROJECT / ".github" / "workflows" / "sweep.yml").read_text())["jobs"]
    assert jobs["trial"]["name"] == "Trial ${{ matrix.trial }}"
    assert LEG.match("Trial 12-3/Sweep trial/Train the trial")[1] == "12"


def test_sweep_workflow_end_to_end(stack: Stack, tmp_path: Path) -> None:
    story = run_sweep(stack, SweepScenario("happy sweep", pull_request=True), tmp_path, "881")
    context = _context(story)
    # Wave 1 on the push, wave 2 on collect's dispatch; wave 2's collect dispatches none (4 of 4 trials).
    assert [w.event for w in story.waves] == ["push", "workflow_dispatch"], context
    # The dispatch names the wave to plan next (gpu-runner next-wave: the one that ended plus one).
    assert story.waves[1].inputs == {
        "sweep": "configs/sweep.yaml",
        "config": "configs/train.yaml",
        "wave": "2",
    }
    for job, each in (("start", 2), ("train", 2), ("stop", 2), ("plan", 1), ("collect", 1)):
        # Two legs per wave, each with its own start/train/stop; plan and collect once.
        assert story.results(job) == [["success"] * each] * 2, (job, context)
    for wave in story.waves:
        assert wave.run.returncode == 0, context
        # Each leg on its own instance (tag gpu-runner:slot); each leg's train job went to its own runner.
        assert sorted(i.slot for i in wave.simulator.instances) == (
            ["0", "1"] if wave.number == 1 else ["2", "3"]
        )
        for instance in wave.simulator.instances:
            assert "job-accepted" in (instance.sim_dir / "calls.log").read_text(), context
    assert len(story.github.dispatches) == 1, story.github.dispatches

    # The study: 4 trials, all COMPLETE, in moto's bucket under sweeps/<study>/.
    s3 = stack.client("s3")
    keys = [
        o["Key"]
        for o in s3.list_objects_v2(
            Bucket=stack.settings["bucket"], Prefix=f"sweeps/{story.study_name}/"
        ).get("Contents", [])
    ]
    assert keys, keys
    trials = story.study().get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4, [(t.number, t.state) for t in trials]

    client = MlflowClient(stack.mlflow_uri)
    parent, kids = assert_totals(story, client, children=4)
    assert sorted(k.data.tags.get("sweep.trial") for k in kids) == ["0", "1", "2", "3"]
    parent = client.get_run(parent.info.run_id)
    assert parent.info.status == "FINISHED", parent.info
    best = max(trials, key=lambda t: t.value)
    assert parent.data.tags["sweep.best_trial"] == str(best.number), parent.data.tags
    assert parent.data.tags.get("sweep.best_decision") in ("candidate", "kept"), parent.data.tags
    assert parent.data.tags["sweep.best_run_id"] == best.user_attrs["sweep.mlflow_run_id"]

    # The sweep branch's open pull request: wave 1's comment job created one comment, wave 2's edited it.
    first, second = story.comments_after_wave
    assert [c["login"] for c in first] == ["github-actions[bot]"], first
    assert [c["id"] for c in second] == [first[0]["id"]], (first, second)
    assert second[0]["body"] != first[0]["body"], "wave 2 did not update the comment"
    body = second[0]["body"]
    assert body.startswith("<!-- ml-project:sweep-report -->\n### Hyperparameter sweep on `sweep/"), body
    assert f"Best trial `{best.number}` of the sweep" in body, body
    sweep_cost = max(
        client.get_metric_history(parent.info.run_id, "sweep_cost_usd"), key=lambda m: m.step
    ).value
    assert f"**Billed GPU cost (all trials so far)**: ${sweep_cost:.4f}" in body, body
    assert "4 complete" in body, body
    posts = [c for c in story.github.calls if c.method == "POST" and c.path.endswith("/comments")]
    patches = [c for c in story.github.calls if c.method == "PATCH"]
    assert (len(posts), len(patches)) == (1, 1), story.github.calls
    record("sweep pull-request comment", {"body": body})

    figures = overhead(story, kids)
    record("sweep overhead (seconds)", {k: round(v, 1) for k, v in figures.items()})
    print("\nsweep overhead (seconds):")
    for key, value in figures.items():
        print(f"  {key:50s} {value:7.1f}")


# One trial's training raises: data.source is searched over two values, one a folder that does not exist (the train
# story's scenario 3 fails the same way). The random sampler with seed 41 (wave 1: seed 42, sweep_study.sampler_for)
# asks one of each, checked below. Not the grid sampler: Optuna's GridSampler.after_trial calls Study.stop() once
# the grid is exhausted, which raises outside optimize() ("`Study.stop` is supposed to be invoked inside an
# objective function or a callback"): the last trial's `tell` fails (seen in this story; reported, not fixed here).
FAILING_SPACE = {"data.source": {"type": "categorical", "choices": ["digits", "data/no-such-folder"]}}


def test_sweep_one_trial_fails(stack: Stack, tmp_path: Path) -> None:
    scenario = SweepScenario(
        "one trial fails",
        sweep={"trials": 2, "parallel": 2, "sampler": {"name": "random", "seed": 41}, "space": FAILING_SPACE},
    )
    story = run_sweep(stack, scenario, tmp_path, "882")
    context = _context(story)
    print(context)
    assert len(story.waves) == 1, context
    assert sorted(story.results("train")[0]) == ["failure", "success"], context
    assert story.results("stop") == [["success", "success"]], context  # the failed leg's stop ran too
    # act ends the run after the failed leg (ACT_ENDS_RUN): collect never ran here; GitHub runs it (its `if`).
    (wave,) = story.waves
    assert ACT_ENDS_RUN in wave.run.log.read_text() and "collect" not in wave.run.results, wave.run.log
    collected = collect_outside_act(story, wave)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "Finished: all 2 trials asked and none left to resume" in collected.stdout, collected.stdout
    trials = story.study().get_trials(deepcopy=False)
    states = {t.params["data.source"]: t.state for t in trials}
    assert states == {"digits": TrialState.COMPLETE, "data/no-such-folder": TrialState.FAIL}, states
    failed = next(t for t in trials if t.state == TrialState.FAIL)
    assert "no-such-folder" in failed.user_attrs.get("sweep.failure", ""), failed.user_attrs
    client = MlflowClient(stack.mlflow_uri)
    parent, _kids = assert_totals(story, client, children=None)
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_sweep_quota_allows_one_runner(stack: Stack, tmp_path: Path) -> None:
    # Spot 4 vCPUs (one g4dn.xlarge/g5.xlarge), on-demand none: 1 of the 2 runners `parallel` asks for.
    scenario = SweepScenario(
        "quota allows 1 of 2", sweep={"trials": 2, "parallel": 2}, quota_vcpus=(0.0, 4.0)
    )
    story = run_sweep(stack, scenario, tmp_path, "883")
    context = _context(story)
    assert [len(w.simulator.instances) for w in story.waves] == [1, 1], context
    assert story.results("train") == [["success"], ["success"]], context
    for wave in story.waves:
        log = wave.run.log.read_text()
        assert "the vCPU quota allows 1 of 2 GPU runners" in log, wave.run.log
        assert "1 runner(s) of parallel 2: the vCPU quota allows no more" in log, wave.run.log
    trials = story.study().get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    client = MlflowClient(stack.mlflow_uri)
    parent, _kids = assert_totals(story, client, children=2)
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_sweep_cancelled_mid_wave(stack: Stack, tmp_path: Path) -> None:
    # Cancelled while both trials train (one in its second of 3 epochs); then the user runs sweep.yml again by
    # hand. A leg cancelled before its first checkpoint trains again, in its own child run all the same.
    scenario = SweepScenario(
        "cancelled mid-wave",
        sweep={"trials": 2, "parallel": 2, "budget": {**SWEEP["budget"], "epochs_per_trial": 3}},
        trigger=cancel_when_both_train,
        rerun_by_hand=1,
    )
    story = run_sweep(stack, scenario, tmp_path, "884")
    context = _context(story)
    assert story.fired[:1] == ["cancel"], context
    first, second = story.waves
    # Every stop job ran in the cancelled wave (teardown is `always()`); collect did not (`!cancelled()`).
    assert story.results("stop")[0] == ["success", "success"], context
    assert "collect" not in first.run.results, context
    # The next run resumed both trials (left RUNNING by the cancel) in their own child runs, and finished.
    assert story.results("train")[1] == ["success", "success"], context
    assert (second.event, second.run.results.get("collect")) == ("workflow_dispatch", "success"), context
    trials = story.study().get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert [t.user_attrs.get("sweep.attempts") for t in trials] == [2, 2], [t.user_attrs for t in trials]
    client = MlflowClient(stack.mlflow_uri)
    parent, kids = assert_totals(story, client, children=2)
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    # Each trial ran on two instances (one per wave), so its child holds two billed costs: the plan's matrix gives
    # each leg its attempt (the waves its trial was planned in), and the stop job logs at that step.
    logged = [[m.step for m in client.get_metric_history(kid.info.run_id, "cost_usd")] for kid in kids]
    assert [sorted(steps) for steps in logged] == [[1, 2], [1, 2]], logged
    assert "already logged to MLflow run" not in second.run.log.read_text(), context
    # The resumed training's own time is attempt 2 too (TRAIN_ATTEMPT), beside its cost of attempt 2.
    for kid in kids:
        assert 2 in {m.step for m in client.get_metric_history(kid.info.run_id, "training_seconds")}, context


def test_sweep_trial_interrupted_and_resumed(stack: Stack, tmp_path: Path) -> None:
    # A spot notice reaches trial 1's instance only, in its second of 5 epochs (time to act on it under load).
    scenario = SweepScenario(
        "one trial interrupted",
        sweep={"trials": 2, "parallel": 2, "budget": {**SWEEP["budget"], "epochs_per_trial": 5}},
        trigger=interrupt_trial_one_in_its_second_epoch,
        collect_when_act_ends=True,
    )
    story = run_sweep(stack, scenario, tmp_path, "885")
    context = _context(story)
    assert story.fired == ["interrupt trial 1"], context
    assert len(story.waves) == 2, context
    first, second = story.waves
    # Wave 1: trial 1 stopped after its checkpoint reached S3 (exit 75: the job fails, and act ends the run); both
    # legs' stop jobs tore down. GitHub's collect job (run outside act here) left it for the next wave.
    assert sorted(story.results("train")[0]) == ["failure", "success"], context
    assert story.results("stop")[0] == ["success", "success"], context
    assert ACT_ENDS_RUN in first.run.log.read_text() and "collect" not in first.run.results, context
    done = story.outside_act[0]
    # Two commands, both succeeded: collect printed next-wave=true, then next-wave dispatched wave 2.
    assert [d.returncode for d in done] == [0, 0], "\n".join(d.stdout + d.stderr for d in done)
    collected = done[0]
    assert "1 to resume" in collected.stdout, collected.stdout
    # Wave 2, from that dispatch: only trial 1, attempt 2, from its checkpoint, in the same child run.
    assert (second.event, second.inputs.get("wave")) == ("workflow_dispatch", "2"), context
    assert story.results("train")[1] == ["success"], context
    assert second.run.results.get("collect") == "success", context
    trials = story.study().get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert [t.user_attrs.get("sweep.waves") for t in trials] == [[1], [1, 2]], [t.user_attrs for t in trials]
    client = MlflowClient(stack.mlflow_uri)
    parent, kids = assert_totals(story, client, children=2)
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    resumed = next(k for k in kids if k.data.tags.get("sweep.trial") == "1")
    assert int(resumed.data.tags.get("resumed.from_epoch", "0")) >= 1, resumed.data.tags
    assert resumed.data.metrics["epochs_run"] == 5, resumed.data.metrics
    steps = sorted(m.step for m in client.get_metric_history(resumed.info.run_id, "cost_usd"))
    assert steps == [1, 2], steps  # both instances billed, each once
