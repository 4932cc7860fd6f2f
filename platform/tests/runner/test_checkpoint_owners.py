"""The record of which session trains which branch and commit (gpu_runner.core.checkpoint_owners, written by the
default branch's launch and `batch wait`): where the launch writes it is where the training's checkpoint store
(gpu_job.checkpoints) reads it, no two branch names share one, and a record is created once. What IAM lets each
role write there is tested against the deployed stacks in test_training_writes.py."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest

from gpu_job import checkpoints
from gpu_runner.core import checkpoint_owners
from gpu_runner.core.errors import RunnerError
from gpu_runner_testing.gpu_runner_stack import REGION

INSTANCE = "i-0aaaaaaaaaaaaaaaa"
TASK = "a" * 32  # an ECS task id (the session name of a Batch job's role)
COMMIT = "c" * 40


@pytest.mark.parametrize("branch", ["train/a-b", "train-a/b", "train/x%2Fy", "train/ü", "train/a/b/c"])
def test_the_launch_writes_the_records_where_the_training_reads_them(branch: str) -> None:
    """gpu-runner's owners_key and the training's owners_prefix agree on the layout, and no two branch names share
    a record (train/a-b and train-a/b do under the checkpoint prefix's lossy branch segment)."""
    key = checkpoint_owners.owners_key(branch, COMMIT, INSTANCE)
    assert key == checkpoints.owners_prefix("checkpoints/", branch, COMMIT) + INSTANCE
    assert key.count("/") == 4  # checkpoints/owners/<branch>/<commit>/<session>: the branch is one segment
    others = {"train/a-b", "train-a/b", "train/x%2Fy", "train/x/y", "train/ü", "train/a/b/c"} - {branch}
    assert all(checkpoint_owners.owners_key(other, COMMIT, INSTANCE) != key for other in others)


def test_a_record_is_created_once_and_a_bad_one_is_refused(moto_endpoint: str) -> None:
    """record() creates the object with If-None-Match: * and reports an existing one; what cannot be a branch,
    a commit or a session is refused before any call, naming the part."""
    s3 = boto3.client("s3", region_name=REGION)
    bucket = f"owners-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    assert checkpoint_owners.record(s3, bucket, branch="train/x", commit=COMMIT, session=TASK)
    assert not checkpoint_owners.record(s3, bucket, branch="train/x", commit=COMMIT, session=TASK)
    body = json.loads(
        s3.get_object(Bucket=bucket, Key=checkpoint_owners.owners_key("train/x", COMMIT, TASK))["Body"].read()
    )
    assert (body["branch"], body["commit"], body["session"]) == ("train/x", COMMIT, TASK)
    for branch, commit, session, part in (("", COMMIT, TASK, "branch"), ("train/x", "c" * 39, TASK, "commit"),
                                          ("train/x", COMMIT, "../../x", "instance id"),
                                          ("train/x", COMMIT, "i-0aaa/x", "instance id")):  # fmt: skip
        with pytest.raises(RunnerError, match=part):
            checkpoint_owners.record(s3, bucket, branch=branch, commit=commit, session=session)
