"""What the batch backend's stories share (test_batch_train_story.py, test_batch_sweep_story.py and the workflow
stories): the commit a branch would push, shipped by `gpu-runner batch ship`, the step outputs the CLIs write, and
the batch host set up as `make bootstrap` and `make batch-up` would leave an account for the real workflows."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3

from gpu_runner.batch.batch_stack import batch_stack_name, job_targets
from gpu_runner_testing.batch_world import IMAGE, RESOURCES, compute_environment, queue
from gpu_runner_testing.git_repository import git
from gpu_runner_testing.story.harness import PROJECT, _edit_yaml, image_python
from gpu_runner_testing.story.stories import Stack, make_stack

# What the commit holds: the package, the lock and the project file (no tests or docs: smaller, same story).
SHIPPED = ("src", "pyproject.toml", "uv.lock")


def commit_of_the_project(root: Path, branch: str, configs: dict[str, dict[str, Any]]) -> str:
    """A repository holding the project's package and its configs/<name> with `configs[name]` merged in (values
    only this commit has), committed on `branch`; returns the commit."""
    root.mkdir(parents=True)
    for name in SHIPPED:
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, root / name)
    (root / "configs").mkdir()
    for name, changes in configs.items():
        shutil.copy2(PROJECT / "configs" / name, root / "configs" / name)
        _edit_yaml(root / "configs" / name, changes)
    git(root, "init", "-q", "-b", branch)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", f"a branch to run on Batch ({branch})")
    return git(root, "rev-parse", "HEAD")


def outputs(path: Path) -> dict[str, str]:
    """The step outputs in $GITHUB_OUTPUT, the last value of each."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


# The workflow stories' region and instance type on the batch host. One type: moto's jobs run on no container
# instance it can describe, so an attempt's cost takes the type the queue allows (batch_cost.instance_of), known
# only when it allows one. The region is immaterial to the stories; the session's other stacks use the project's.
BATCH_REGION = "us-east-1"
BATCH_INSTANCE_TYPES = ["g5.xlarge"]
SUBMIT_ROLE_ARN = "arn:aws:iam::123456789012:role/batch-submit"
# What a workflow story adds to configs/gpu-runner.yaml, and the repository variable batch.yml assumes.
BATCH_SETTINGS = {"backend": "batch", "region": BATCH_REGION, "instance_types": BATCH_INSTANCE_TYPES}
BATCH_VARIABLES = {"AWS_BATCH_ROLE_ARN": SUBMIT_ROLE_ARN}


def batch_host_stack(endpoint: str, mlflow_uri: str) -> Stack:
    """The story's AWS is the batch host, with what bootstrap and `gpu-runner batch up` would have created there:
    the bucket, the queue <stack>-gpu on a Spot compute environment and the job definition <stack>-train of the
    project's stack name."""
    stack = make_stack(endpoint, mlflow_uri, image_python(PROJECT / ".e2e-cache"))
    stack = replace(
        stack, settings={**stack.settings, "region": BATCH_REGION, "instance_types": BATCH_INSTANCE_TYPES}
    )
    name = batch_stack_name(stack.settings["project"], stack.repository)
    queue_name, definition = job_targets(name, multinode=False)
    environment = compute_environment(
        endpoint, f"{name}-spot", "SPOT", BATCH_INSTANCE_TYPES, region=BATCH_REGION
    )
    queue(endpoint, queue_name, environment, region=BATCH_REGION)
    boto3.client("batch", region_name=BATCH_REGION, endpoint_url=endpoint).register_job_definition(
        jobDefinitionName=definition, type="container",
        containerProperties={"image": IMAGE, "command": ["true"], "resourceRequirements": RESOURCES},
    )  # fmt: skip
    return stack


def batch_jobs(stack: Stack) -> list[dict[str, Any]]:
    """Every job of every queue on the batch host (ListJobs by status: it lists one status at a time)."""
    batch = stack.client("batch")
    queues = [q["jobQueueName"] for q in batch.describe_job_queues()["jobQueues"]]
    return [
        job
        for name in queues
        for status in ("SUCCEEDED", "FAILED", "RUNNING", "RUNNABLE", "SUBMITTED", "PENDING", "STARTING")
        for job in batch.list_jobs(jobQueue=name, jobStatus=status)["jobSummaryList"]
    ]
