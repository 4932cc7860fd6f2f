"""`make e2e`: the cost report over a run the offline story produced (train.yml under act, the stop job logging
the billed seconds and cost of the attempt to the run), checked against that run's own metric histories.

Its own short story, in its own MLflow experiment: the session's other stories log runs to the project's
experiment in an order pytest decides, and this test must know exactly which runs the report covers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gpu_runner import cli
from gpu_runner.cost import report as cost_report
from gpu_runner_testing.story.stories import FAST_TRAIN, Scenario, Stack, run_story

pytestmark = pytest.mark.e2e
RUN_ID = "888"
EXPERIMENT = "e2e-cost-report-story"
SUMMED = ("billed_seconds", "cost_usd", "overhead_seconds", "training_seconds")


def test_cost_report_equals_the_story_runs_logged_costs(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = {**FAST_TRAIN, "tracking": {**FAST_TRAIN["tracking"], "experiment_name": EXPERIMENT}}
    story = run_story(stack, Scenario(90, "cost report", "all green", train=train), tmp_path, RUN_ID)
    assert story.run is not None
    context = f"act log: {story.run.log}"
    assert story.run.lifecycle_results == {"start": "success", "train": "success", "stop": "success"}, context

    client = MlflowClient(stack.mlflow_uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None, context
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, runs
    run = runs[0]
    tags, run_id = run.data.tags, run.info.run_id
    cost_tags = {k: v for k, v in tags.items() if k.startswith("cost.")}
    assert "billed_seconds" in run.data.metrics, (
        f"the stop job logged no cost metrics to the story's run: metrics {sorted(run.data.metrics)}, "
        f"cost tags {cost_tags}; {context}"
    )
    histories = {name: client.get_metric_history(run_id, name) for name in SUMMED}
    sums = {name: sum(m.value for m in history) for name, history in histories.items()}
    # One workflow attempt: every cost metric at step 1.
    assert [m.step for m in histories["billed_seconds"]] == [1], histories["billed_seconds"]
    assert sums["billed_seconds"] > 0 and sums["cost_usd"] > 0, sums

    report = cost_report.cost_report([EXPERIMENT], 1, uri=stack.mlflow_uri)
    assert (report.runs, report.attempts, report.excluded_runs) == (1, 1, 0)
    assert report.gpu_hours == sums["billed_seconds"] / 3600
    assert report.billed_usd == sums["cost_usd"]
    assert report.overhead_hours == sums["overhead_seconds"] / 3600
    assert report.training_hours == sums["training_seconds"] / 3600
    assert report.spot_share_pct == (100.0 if tags["cost.market"] == "spot" else 0.0)
    assert report.always_on_monthly_usd == 730 * float(tags["cost.on_demand_usd_per_hour"])
    assert [(u.instance_type, u.market) for u in report.usage] == [
        (tags["cost.instance_type"], tags["cost.market"])
    ]

    # And the command a user runs (make cost-report), over the same server.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", stack.mlflow_uri)
    out = tmp_path / "cost-report"
    assert cli.main(["cost-report", "--experiment", EXPERIMENT, "--days", "1", "--out", str(out)]) == 0
    assert "| GPU runs (workflow attempts) | 1 (1) |" in (out / "cost-report.md").read_text()
    assert (out / "cost-report.png").stat().st_size > 0
