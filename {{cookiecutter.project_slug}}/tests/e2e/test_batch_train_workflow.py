"""The real train.yml with `backend: batch`, under act: the same training story as test_train_workflow.py, but the
GPU work goes to AWS Batch. start (the platform's gpu-runner-start.yml at the pinned commit) reads the backend and launches
nothing; the `batch` job calls the platform's batch.yml, which ships the commit, opens the MLflow run,
submits to the Batch stack's queue on the batch host (moto's Batch backend, each job a local process:
gpu_runner_testing/batch_host.py), streams the job's lines into the workflow log, waits and logs the cost; the comment job
reports the run on the pull request. No runner is registered and no instance is launched.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from gpu_runner_testing.story.batch_story import (
    BATCH_INSTANCE_TYPES,
    BATCH_SETTINGS,
    BATCH_VARIABLES,
    batch_jobs,
)
from gpu_runner_testing.story.harness import BRANCH
from gpu_runner_testing.story.stories import (
    Scenario,
    Stack,
    Story,
    cancel_workflow,
    run_story,
    workflow_run_ids,
)
from mlflow.tracking import MlflowClient

from gpu_runner.batch.batch_jobs import CANCEL_REASON

pytestmark = pytest.mark.e2e
RUN_ID = "1818"


def _scenario(name: str, **changes: Any) -> Scenario:
    return Scenario(0, name, "", gpu_runner=BATCH_SETTINGS, variables=BATCH_VARIABLES, **changes)


def test_train_yml_trains_on_aws_batch(batch_host_stack: Stack, tmp_path: Path) -> None:
    stack = batch_host_stack
    story = run_story(stack, _scenario("batch backend", pull_request=True), tmp_path, RUN_ID)
    run, simulator = story.run, story.simulator
    assert run is not None and simulator is not None
    context = f"act log: {run.log}\ngithub calls: {story.github_calls}"

    # start, then the batch job and the comment; the runner's train and stop jobs are skipped (no result).
    assert run.results == {"start": "success", "batch": "success", "comment": "success"}, context
    assert run.returncode == 0, context
    # No runner, no instance: nothing was launched or registered.
    assert simulator.instances == [] and story.github.runners == {}, context
    assert story.github.issued_jit_configs == {}, context

    # One Batch job, in the stack's queue, tagged as its stack's, that ran the shipped commit.
    (job,) = [j for j in batch_jobs(stack) if j["jobName"] == f"train-{RUN_ID}-1"]
    assert job["status"] == "SUCCEEDED", context
    log = run.log.read_text()
    # The job's lines streamed into the workflow log, behind their label; its Keras epochs among them.
    assert "[job] unpacked " in log and "[job] Epoch 1/" in log, context

    client = MlflowClient(stack.mlflow_uri)
    (run_id,) = workflow_run_ids(client, RUN_ID)
    mlrun = client.get_run(run_id)
    assert mlrun.info.status == "FINISHED"
    tags = mlrun.data.tags
    assert (
        tags["gpu.backend"] == "batch"
        and tags["git.commit"] == story.head_sha
        and tags["git.branch"] == BRANCH
    )
    epochs = int(mlrun.data.metrics["epochs_run"])
    assert [m.step for m in client.get_metric_history(run_id, "val_accuracy")] == list(range(epochs))
    # The cost record of the runner backend, from the job's attempt, on the type the queue allows.
    assert {"billed_seconds", "cost_usd"} <= set(mlrun.data.metrics), mlrun.data.metrics
    assert tags["cost.instance_type"] == BATCH_INSTANCE_TYPES[0], tags
    # Checkpoints in the bucket, as on a runner.
    bucket = stack.checkpoint_uri[5:].split("/")[0]
    assert stack.client("s3").list_objects_v2(Bucket=bucket, Prefix="checkpoints/").get("KeyCount", 0) > 0
    # The comment on the pull request names the run.
    (comment,) = story.pr_comments
    assert run_id in comment["body"], comment["body"]


def _cancel_once_running(story: Story, rec: dict[str, Any], process: subprocess.Popen) -> None:
    """ "Cancel workflow" as soon as the wait step reports the Batch job RUNNING (sent to act itself, as
    stories.cancel_during_training does)."""
    if (
        rec.get("jobID") == "batch"
        and rec.get("msg", "").strip() == "RUNNING"
        and "cancel" not in story.fired
    ):
        story.fired.append("cancel")
        cancel_workflow(process)


def test_cancelling_the_workflow_terminates_the_batch_job(batch_host_stack: Stack, tmp_path: Path) -> None:
    """A cancelled run must not leave its Batch job (and the GPU under it) running: the batch job's last step
    terminates it."""
    stack = batch_host_stack
    run_id = "1819"
    story = run_story(
        stack, _scenario("batch backend, cancelled", trigger=_cancel_once_running), tmp_path, run_id
    )
    run = story.run
    assert run is not None and story.fired == ["cancel"]
    log = run.log.read_text()
    context = f"act log: {run.log}"
    assert "Success - Main Terminate the Batch job (this job did not end well)" in log, context
    (job,) = [j for j in batch_jobs(stack) if j["jobName"] == f"train-{run_id}-1"]
    described = stack.client("batch").describe_jobs(jobs=[job["jobId"]])["jobs"][0]
    assert described["status"] == "FAILED" and described["statusReason"] == CANCEL_REASON, described
    assert run.results.get("batch") != "success" and "comment" not in run.results, context
