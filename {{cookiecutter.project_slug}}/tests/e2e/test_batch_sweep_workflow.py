"""The real sweep.yml with `backend: batch`, under act: the sweep story of test_sweep_workflow.py (4 trials, 2 per
wave, the next wave dispatched by collect), with each wave run as one AWS Batch array job on the batch host
(gpu_runner_testing/batch_host.py) by the platform's batch.yml (at the pinned commit) instead of one runner per trial. The same study, parent
and child runs and cost roll-up; no instance launched, no runner registered.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_runner_testing.story.batch_story import (
    BATCH_INSTANCE_TYPES,
    BATCH_SETTINGS,
    BATCH_VARIABLES,
    batch_jobs,
)
from gpu_runner_testing.story.stories import Stack
from gpu_runner_testing.story.sweep_story import SweepScenario, run_sweep
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from test_sweep_workflow import _context, assert_totals

pytestmark = pytest.mark.e2e


def test_sweep_yml_runs_each_wave_as_one_array_job(batch_host_stack: Stack, tmp_path: Path) -> None:
    stack = batch_host_stack
    scenario = SweepScenario("sweep on batch", gpu_runner=BATCH_SETTINGS, variables=BATCH_VARIABLES)
    story = run_sweep(stack, scenario, tmp_path, "1882")
    context = _context(story)
    # Wave 1 on the push, wave 2 on collect's dispatch, as on runners; plan, the batch job and collect once each.
    assert [w.event for w in story.waves] == ["push", "workflow_dispatch"], context
    for job in ("plan", "batch", "collect"):
        assert story.results(job) == [["success"]] * 2, (job, context)
    for job in ("start", "train", "stop"):  # sweep-trial.yml's legs: skipped
        assert story.results(job) == [[]] * 2, (job, context)
    for wave in story.waves:
        assert wave.run.returncode == 0, context
        assert wave.simulator.instances == [], context
        log = wave.run.log.read_text()
        # Each child's lines streamed behind its index.
        assert "[0] " in log and "[1] " in log, context
    assert story.github is not None and story.github.runners == {} and story.github.issued_jit_configs == {}

    # Two array jobs of two children, one per wave, both SUCCEEDED.
    # (moto's ListJobs lists array children, "<parent id>:<index>", beside their parent: the parents only here.)
    jobs = [j for j in batch_jobs(stack) if j["jobName"].startswith("sweep-1882") and ":" not in j["jobId"]]
    assert sorted(j["jobName"] for j in jobs) == ["sweep-18821-1", "sweep-18822-1"], jobs
    described = stack.client("batch").describe_jobs(jobs=[j["jobId"] for j in jobs])["jobs"]
    assert [(d["status"], d["arrayProperties"]["size"]) for d in described] == [("SUCCEEDED", 2)] * 2, (
        described
    )

    # The study: 4 COMPLETE trials; MLflow: the parent, 4 children each priced, the parent's roll-up their sum.
    trials = story.study().get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4, [(t.number, t.state) for t in trials]
    client = MlflowClient(stack.mlflow_uri)
    parent, kids = assert_totals(story, client, children=4)
    assert sorted(k.data.tags.get("sweep.trial") for k in kids) == ["0", "1", "2", "3"]
    assert {k.data.tags.get("cost.instance_type") for k in kids} == set(BATCH_INSTANCE_TYPES), context
    best = max(trials, key=lambda t: t.value)
    parent = client.get_run(parent.info.run_id)
    assert parent.data.tags["sweep.best_trial"] == str(best.number), parent.data.tags
