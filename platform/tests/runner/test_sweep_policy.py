"""The sweep role's policy (sweep.yml's plan and collect jobs, branch code): the study calls and the capacity
look-ups, each made for real against the stack on the moto server and authorized against the deployed policy,
and everything else it must not reach."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from gpu_job import study_storage
from gpu_runner.core import quotas
from gpu_runner.core.aws import Aws
from gpu_runner.ec2_runner import capacity
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import REGION, authorizations, role_policies
from gpu_runner_testing.iam_requests import (
    ACCOUNT,
    Call,
    Request,
    allowed,
    granted_actions,
    launch_path_requests,
    s3_context,
)
from gpu_runner_testing.service_quotas import quota_body

STUDY = "sweeps/lr-search"
BUCKET = "<the stack's bucket>"  # put in by each test (the bucket's name is made per session)


def test_sweep_role_reaches_only_the_studies_and_the_capacity_lookups(
    stack: dict[str, Any], recorded: tuple[list[Call], boto3.Session]
) -> None:
    """What plan and collect do: append to, replay and claim waves of a study under sweeps/ (the real study store
    against the moto server), and the capacity
    check `gpu-runner capacity` (the applied vCPU quota, the default where none is applied, the vCPUs per type,
    the instances holding quota). Every call is allowed, and every action the policy grants is one of them."""
    calls, session = recorded
    s3, bucket = session.client("s3"), stack["bucket"]
    # The study store's own calls (the plan and collect jobs make them through Optuna): append to the journal,
    # replay it, claim a wave and read the claims back. Each object is created once (PutObject IfNoneMatch "*").
    uri = f"s3://{bucket}/{STUDY}/"
    journal = study_storage.S3JournalBackend(uri, client=s3)
    journal.append_logs([{"op_code": 0, "study_name": "lr-search"}])
    journal.append_logs([{"op_code": 1}, {"op_code": 2}])
    assert len(study_storage.S3JournalBackend(uri, client=s3).read_logs(0)) == 3
    study_storage.claim_wave(uri, 1, {"trials": [0, 1]}, client=s3)
    assert study_storage.read_wave(uri, 1, client=s3) == {"trials": [0, 1]}
    assert study_storage.latest_wave(uri, client=s3) == 1
    # The plan job's capacity check, `gpu-runner capacity` (clients made from here on get the quota answers; the S3
    # client above streams its bodies, which the fault hook does not read). moto serves no ec2 quota
    # (gpu_runner_testing/service_quotas.py): the on-demand quota has an applied value, the spot quota none, so Service Quotas
    # answers NoSuchResourceException and the default is read.
    faults = AwsFaults(session)
    on_demand, spot = quotas.ON_DEMAND_QUOTA[0], quotas.SPOT_QUOTA[0]
    faults.answer("service-quotas", "GetServiceQuota", quota_body(on_demand, 64.0, REGION),
                  when=lambda params: params.get("QuotaCode") == on_demand)  # fmt: skip
    faults.fail("service-quotas", "GetServiceQuota", "NoSuchResourceException",
                when=lambda params: params.get("QuotaCode") == spot)  # fmt: skip
    faults.answer("service-quotas", "GetAWSDefaultServiceQuota", quota_body(spot, 32.0, REGION))
    found = capacity.capacity(stack["settings"], Aws(session), wanted=2)
    assert found.runners == 2, found

    requests = authorizations(calls)
    assert {c.operation for c in calls} == {
        "PutObject", "GetObject", "ListObjectsV2", "GetServiceQuota", "GetAWSDefaultServiceQuota",
        "DescribeInstanceTypes", "DescribeInstances",
    }  # fmt: skip
    # Every write carried If-None-Match "*", and the policy saw it (the Denies of test_study_append_only).
    writes = [r for r in requests if r.action == "s3:PutObject"]
    assert len(writes) == 3 and all(r.context.get("s3:if-none-match") == "*" for r in writes), writes
    policy = role_policies(stack, "SweepRoleArn")
    denied = [r for r in requests if not allowed(policy, r)]
    assert denied == [], denied
    assert granted_actions(policy) == {r.action for r in requests}


def _s3(action: str, key: str, **context: str) -> Request:
    resource = f"arn:aws:s3:::{BUCKET}/{key}" if key else f"arn:aws:s3:::{BUCKET}"
    return Request(action, resource, {"aws:RequestedRegion": REGION, **s3_context(), **context})


INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
OUR_TAGS = {"ec2:ResourceTag/gpu-runner:managed-by": "gpu-runner"}
REFUSED = {
    # Outside the studies: data, checkpoints, exports, the runner mirror, the reaper's package, a look-alike prefix.
    "write-a-checkpoint": _s3("s3:PutObject", "checkpoints/run/ckpt-1.index"),
    "read-training-data": _s3("s3:GetObject", "data/digits.npz"),
    "delete-an-export": _s3("s3:DeleteObject", "exports/model.tflite"),
    "replace-the-runner-tarball": _s3("s3:PutObject", "runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz"),
    "replace-the-reaper-package": _s3("s3:PutObject", "gpu-runner/reaper-lambda/" + "0" * 64 + ".zip"),
    "look-alike-prefix": _s3("s3:PutObject", "sweeps-evil/x"),
    "the-prefix-without-its-slash": _s3("s3:PutObject", "sweeps"),
    "list-the-whole-bucket": _s3("s3:ListBucket", ""),
    "list-the-checkpoints": _s3("s3:ListBucket", "", **{"s3:prefix": "checkpoints/"}),
    "list-by-a-look-alike-prefix": _s3("s3:ListBucket", "", **{"s3:prefix": "sweeps"}),
    # A bucket of that name in another account (after ours was deleted).
    "a-strangers-bucket": Request(
        "s3:PutObject", f"arn:aws:s3:::{BUCKET}/sweeps/x", {"aws:RequestedRegion": REGION, **s3_context("999999999999")}
    ),
    "bucket-policy": _s3("s3:PutBucketPolicy", ""),
    # The launch path and the GitHub credential.
    **launch_path_requests(REGION, DEFAULT_REPOSITORY),
    "terminate-our-instance": Request("ec2:TerminateInstances", INSTANCE, OUR_TAGS),
    "tag-an-instance": Request("ec2:CreateTags", INSTANCE, OUR_TAGS),
    "pass-the-runner-role": Request(
        "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/runner", {"iam:PassedToService": "ec2.amazonaws.com"}
    ),
    "raise-the-quota": Request("servicequotas:RequestServiceQuotaIncrease", "*", {"aws:RequestedRegion": REGION}),
    "decrypt-directly": Request("kms:Decrypt", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/x", {"aws:RequestedRegion": REGION}),
    # The look-ups, in another region than the stack's.
    "describe-instances-elsewhere": Request("ec2:DescribeInstances", "*", {"aws:RequestedRegion": "us-east-1"}),
    "quota-elsewhere": Request("servicequotas:GetServiceQuota", "*", {"aws:RequestedRegion": "us-east-1"}),
}  # fmt: skip


@pytest.mark.parametrize("attack", REFUSED, ids=list(REFUSED))
def test_sweep_role_refuses_everything_else(stack: dict[str, Any], attack: str) -> None:
    request = REFUSED[attack]
    request = Request(request.action, request.resource.replace(BUCKET, stack["bucket"]), request.context)
    policy = role_policies(stack, "SweepRoleArn")
    assert not allowed(policy, request), attack
    # Not vacuous: the same kind of request inside the studies (or in the stack's region) is allowed; a write
    # there as the study store makes it (If-None-Match "*"). Deletes are refused everywhere: no study is deleted.
    if request.action == "s3:DeleteObject":
        assert "s3:DeleteObject" not in granted_actions(policy)
    elif (
        request.action.startswith("s3:")
        and request.action != "s3:PutBucketPolicy"
        and attack != "a-strangers-bucket"
    ):
        inside = (
            Request(request.action, request.resource, {**request.context, "s3:prefix": f"{STUDY}/"})
            if request.action == "s3:ListBucket"
            else Request(
                request.action,
                f"arn:aws:s3:::{stack['bucket']}/{STUDY}/journal/000000000000.jsonl",
                {**request.context, "s3:if-none-match": "*"},
            )
        )
        assert allowed(policy, inside), attack
