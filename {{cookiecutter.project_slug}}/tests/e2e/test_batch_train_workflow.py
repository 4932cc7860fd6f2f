"""The real train.yml with `backend: batch`, under act: the same training story as test_train_workflow.py, but the
GPU work goes to AWS Batch. start (the default branch's gpu-runner-start.yml) reads the backend and launches
nothing; the `batch` job calls the default branch's batch.yml, which ships the commit, opens the MLflow run,
submits to the Batch stack's queue on the batch host (moto's Batch backend, each job a local process:
doubles/batch_host.py), streams the job's lines into the workflow log, waits and logs the cost; the comment job
reports the run on the pull request. No runner is registered and no instance is launched.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from doubles.batch_world import IMAGE, RESOURCES, compute_environment, queue
from harness import BRANCH, PROJECT, image_python
from mlflow.tracking import MlflowClient
from stories import Scenario, Stack, Story, make_stack, run_story, workflow_run_ids

from gpu_runner.batch_jobs import CANCEL_REASON
from gpu_runner.batch_stack import batch_stack_name, job_targets

pytestmark = pytest.mark.e2e
RUN_ID = "1818"
SUBMIT_ROLE_ARN = "arn:aws:iam::123456789012:role/batch-submit"
# The batch host's region. Seen with moto 5.x in eu-west-1 (the project's default): DescribeContainerInstances on
# the cluster of a compute environment moto created fails with an internal KeyError (HTTP 500, moto.log), where AWS
# answers a failure entry or ClusterNotFoundException, so the cost step's fallback to the queue's types is never
# reached. In us-east-1 moto answers as AWS does; the region is otherwise immaterial to this story.
REGION = "us-east-1"
# One type: moto's jobs run on no container instance it can describe, so the cost takes the type the queue allows
# (batch_cost.instance_of), which is known only when it allows one.
INSTANCE_TYPES = ["g5.xlarge"]


@pytest.fixture(scope="module")
def batch_host_stack(batch_endpoint: str, mlflow_server: str) -> Stack:
    """The story's AWS is the batch host: what bootstrap and `gpu-runner batch up` would have created there (the
    bucket, the queue <stack>-gpu and the job definition <stack>-train of the project's stack name)."""
    stack = make_stack(batch_endpoint, mlflow_server, image_python(PROJECT / ".e2e-cache"))
    stack = replace(stack, settings={**stack.settings, "region": REGION, "instance_types": INSTANCE_TYPES})
    name = batch_stack_name(stack.settings["project"], stack.repository)
    queue_name, definition = job_targets(name, multinode=False)
    environment = compute_environment(
        batch_endpoint, f"{name}-spot", "SPOT", stack.settings["instance_types"], region=stack.region
    )
    queue(batch_endpoint, queue_name, environment, region=stack.region)
    boto3.client("batch", region_name=stack.region, endpoint_url=batch_endpoint).register_job_definition(
        jobDefinitionName=definition, type="container",
        containerProperties={"image": IMAGE, "command": ["true"], "resourceRequirements": RESOURCES},
    )  # fmt: skip
    return stack


def _batch_jobs(stack: Stack) -> list[dict[str, Any]]:
    batch = stack.client("batch")
    queues = [q["jobQueueName"] for q in batch.describe_job_queues()["jobQueues"]]
    return [
        job
        for name in queues
        for status in ("SUCCEEDED", "FAILED", "RUNNING", "RUNNABLE", "SUBMITTED", "PENDING", "STARTING")
        for job in batch.list_jobs(jobQueue=name, jobStatus=status)["jobSummaryList"]
    ]


def _scenario(name: str, **changes: Any) -> Scenario:
    settings = {"backend": "batch", "region": REGION, "instance_types": INSTANCE_TYPES}
    return Scenario(
        0, name, "", gpu_runner=settings, variables={"AWS_BATCH_ROLE_ARN": SUBMIT_ROLE_ARN}, **changes
    )


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
    (job,) = [j for j in _batch_jobs(stack) if j["jobName"] == f"train-{RUN_ID}-1"]
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
    assert tags["cost.instance_type"] == INSTANCE_TYPES[0], tags
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
        for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split():
            os.kill(int(pid), signal.SIGINT)


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
    (job,) = [j for j in _batch_jobs(stack) if j["jobName"] == f"train-{run_id}-1"]
    described = stack.client("batch").describe_jobs(jobs=[job["jobId"]])["jobs"][0]
    assert described["status"] == "FAILED" and described["statusReason"] == CANCEL_REASON, described
    assert run.results.get("batch") != "success" and "comment" not in run.results, context
