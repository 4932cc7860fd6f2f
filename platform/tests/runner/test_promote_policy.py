"""The promote role's policy (issue 30, High 3: promote.yml reads the held-out set, default branch, production
environment): the calls a project's holdout download makes (the job library's s3sync), made for real against the stack on the moto
server and authorized against the deployed policy, every grant used; everything else of the bucket and of AWS
refused, the held-out set above all never written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from gpu_job import s3sync
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import REGION, authorizations, role_policies
from gpu_runner_testing.iam_requests import (
    ACCOUNT,
    Request,
    allowed,
    granted_actions,
    launch_path_requests,
    record_calls,
    s3_context,
)

HOLDOUT = "holdout/digits-v1"
BUCKET = "<the stack's bucket>"  # put in by each test (the bucket's name is made per session)


@pytest.fixture
def held_out(stack: dict[str, Any]) -> str:
    """Two held-out images in the stack's bucket, written with the test's own (unrecorded) client (an admin's)."""
    bucket, plain = stack["bucket"], stack["session"].client("s3")
    for name in ("0/a.png", "1/b.png"):
        plain.put_object(Bucket=bucket, Key=f"{HOLDOUT}/{name}", Body=b"image")
    return bucket


def test_promote_role_covers_exactly_reading_the_holdout(
    stack: dict[str, Any], held_out: str, tmp_path: Path
) -> None:
    """holdout.py reads s3://<bucket>/holdout/<folder>/ with s3sync, as training reads data.source."""
    recorded_session = boto3.Session(region_name=REGION)
    calls = record_calls(recorded_session)
    s3sync.sync_prefix(f"s3://{held_out}/{HOLDOUT}/", tmp_path, client=recorded_session.client("s3"))
    assert sorted(p.name for p in tmp_path.rglob("*.png")) == ["a.png", "b.png"]
    requests = authorizations(calls)
    policy = role_policies(stack, "PromoteRoleArn")
    denied = [r for r in requests if not allowed(policy, r)]
    assert denied == [], denied
    assert granted_actions(policy) == {r.action for r in requests} == {"s3:ListBucket", "s3:GetObject"}


def _s3(action: str, key: str, **context: str) -> Request:
    resource = f"arn:aws:s3:::{BUCKET}/{key}" if key else f"arn:aws:s3:::{BUCKET}"
    return Request(action, resource, {"aws:RequestedRegion": REGION, **s3_context(), **context})


REFUSED = {
    # Writing the held-out set (its images or its labels, the folder names) in any way.
    "overwrite-a-held-out-image": _s3("s3:PutObject", f"{HOLDOUT}/0/a.png"),
    "delete-a-held-out-image": _s3("s3:DeleteObject", f"{HOLDOUT}/0/a.png"),
    "add-a-held-out-image": _s3("s3:PutObject", f"{HOLDOUT}/1/new.png"),
    # Reading or listing anything else of the bucket: training data, served files, checkpoints, studies.
    "read-the-training-data": _s3("s3:GetObject", "data/digits/0/a.png"),
    "read-the-served-files": _s3("s3:GetObject", "mlflow-artifacts/1/abc/artifacts/exports/model.tflite"),
    "read-a-checkpoint": _s3("s3:GetObject", "checkpoints/train-x/abc/chief/ckpt-1.index"),
    "read-a-look-alike-prefix": _s3("s3:GetObject", "holdout-evil/x.png"),
    "list-the-whole-bucket": _s3("s3:ListBucket", ""),
    "list-the-data": _s3("s3:ListBucket", "", **{"s3:prefix": "data/"}),
    "list-a-look-alike-prefix": _s3("s3:ListBucket", "", **{"s3:prefix": "holdout-evil/"}),
    # A bucket of that name in another account (after ours was deleted), another bucket.
    "read-a-strangers-bucket": Request(
        "s3:GetObject", f"arn:aws:s3:::{BUCKET}/{HOLDOUT}/0/a.png", {"aws:RequestedRegion": REGION, **s3_context("999999999999")}
    ),
    "another-bucket": Request("s3:GetObject", f"arn:aws:s3:::someone-else/{HOLDOUT}/0/a.png", s3_context()),
    "bucket-policy": _s3("s3:PutBucketPolicy", ""),
    # The launch path and the GitHub credential.
    **launch_path_requests(REGION, DEFAULT_REPOSITORY),
    "decrypt-directly": Request("kms:Decrypt", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/x", {"aws:RequestedRegion": REGION}),
}  # fmt: skip


@pytest.mark.parametrize("attack", REFUSED, ids=list(REFUSED))
def test_promote_role_reads_the_holdout_and_nothing_else(stack: dict[str, Any], attack: str) -> None:
    request = REFUSED[attack]
    request = Request(request.action, request.resource.replace(BUCKET, stack["bucket"]), request.context)
    policy = role_policies(stack, "PromoteRoleArn")
    assert not allowed(policy, request), attack
    # Not vacuous: a read of the held-out set of our bucket is allowed.
    inside = Request("s3:GetObject", f"arn:aws:s3:::{stack['bucket']}/{HOLDOUT}/0/a.png", {**s3_context()})
    assert allowed(policy, inside), attack
