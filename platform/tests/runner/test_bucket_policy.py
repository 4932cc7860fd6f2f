"""Who may use the bucket's objects, and from where (issue 30, Low): the bucket policy admits the stack's roles, the
roles tagged with the bucket (the MLflow server's, the Batch roles) and the administrators only; the runner role's
S3 requests count only through the stack's VPC endpoint.

The IAM evaluator (gpu_runner_testing.iam_requests) with the DEPLOYED bucket policy and each principal's deployed identity
policies together, as IAM evaluates a same-account request; bootstrap's choices (bucket_access.py) against moto."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from gpu_runner.setup import bucket_access
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    deployed_bucket_policy,
    managed_policies,
    role_policies,
    runner_role_name,
)
from gpu_runner_testing.iam_requests import ACCOUNT, Request, resource_policy_allows, s3_context

COMMIT = "c" * 40
EVERYTHING = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def _bucket_policy(stack: dict[str, Any]) -> dict[str, Any]:
    return deployed_bucket_policy(stack)


def _as(principal: str, **more: str) -> dict[str, str]:
    """The context of a signed request over TLS by `principal` (aws:PrincipalArn; aws:PrincipalIsAWSService is in
    every signed request: IAM User Guide, "AWS global condition context keys")."""
    return {**s3_context(), "aws:PrincipalArn": principal, "aws:PrincipalIsAWSService": "false",
            "aws:SecureTransport": "true", **more}  # fmt: skip


def _requests(bucket: str, key: str, context: dict[str, str]) -> list[Request]:
    obj = f"arn:aws:s3:::{bucket}/{key}"
    return [Request("s3:GetObject", obj, context), Request("s3:PutObject", obj, context),
            Request("s3:DeleteObject", obj, context), Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", context)]  # fmt: skip


@pytest.mark.parametrize(
    "principal",
    [
        f"arn:aws:iam::{ACCOUNT}:role/ReadOnlyAuditor",
        f"arn:aws:iam::{ACCOUNT}:user/developer",
        # A role of another project's gpu-runner stack in the account: not ours, whatever its name says.
        f"arn:aws:iam::{ACCOUNT}:role/gpu-runner-other-project-0a1b2c3d-RunnerRole-ABCDEF123456",
    ],
)
def test_a_principal_of_the_account_with_s3_on_everything_is_refused_the_objects(
    principal: str, stack: dict[str, Any]
) -> None:
    """Attack: another principal of the account whose own IAM policy allows s3:* on * reads the data, the held-out
    set and the models, or writes them. The bucket policy's Deny refuses every object and the listing."""
    policy, bucket = _bucket_policy(stack), stack["bucket"]
    for key in (
        "data/digits/0/0001.png",
        "holdout/0/0001.png",
        "mlflow-artifacts/1/r/artifacts/model.tflite",
    ):
        for request in _requests(bucket, key, _as(principal)):
            assert not resource_policy_allows(policy, principal, [EVERYTHING], request), (principal, request)
    # Nor does a tag of another bucket, or the right tag's key with another value, admit it.
    tagged = _as(principal, **{"aws:PrincipalTag/gpu-runner:bucket": f"{bucket}-other"})
    assert not resource_policy_allows(policy, principal, [EVERYTHING], _requests(bucket, "data/x", tagged)[0])


def test_the_stacks_roles_the_tagged_roles_and_the_administrators_keep_their_calls(
    stack: dict[str, Any],
) -> None:
    """Each admitted principal with its own deployed policies, on the calls it makes: the runner role (its own
    checkpoint), the launch role (an owners record), the sweep role (a study), the predict role (a prediction),
    the promote role (the held-out set);
    a role of the project's other stacks by its tag (the MLflow server writing its artifacts); the administrator
    bootstrap ran as (moto's user) and the root, with s3:*."""
    session, policy, bucket, outputs = (
        stack["session"],
        _bucket_policy(stack),
        stack["bucket"],
        stack["outputs"],
    )
    iam = session.client("iam")
    runner = iam.get_role(RoleName=runner_role_name(stack))["Role"]
    userid = f"{runner['RoleId']}:i-0aaaaaaaaaaaaaaaa"
    obj = f"arn:aws:s3:::{bucket}"
    calls = {
        runner["Arn"]: (
            managed_policies(session, runner["RoleName"]),
            [Request("s3:PutObject", f"{obj}/checkpoints/{userid}/train-x/abc/state.json"),
             Request("s3:GetObject", f"{obj}/data/digits/0/0001.png"), Request("s3:ListBucket", obj)],
            {"aws:userid": userid},
        ),
        outputs["TrainRoleArn"]: (
            role_policies(stack, "TrainRoleArn"),
            [Request("s3:PutObject", f"{obj}/checkpoints/owners/train%2Fx/{COMMIT}/i-0aaaaaaaaaaaaaaaa",
                     {"s3:if-none-match": "*"})],
            {},
        ),
        outputs["SweepRoleArn"]: (
            role_policies(stack, "SweepRoleArn"),
            [Request("s3:PutObject", f"{obj}/sweeps/s/journal/1.jsonl", {"s3:if-none-match": "*"})],
            {},
        ),
        outputs["PredictRoleArn"]: (
            role_policies(stack, "PredictRoleArn"),
            [Request("s3:PutObject", f"{obj}/predictions/b/part-0.parquet")],
            {},
        ),
        outputs["PromoteRoleArn"]: (
            role_policies(stack, "PromoteRoleArn"),
            [Request("s3:GetObject", f"{obj}/holdout/0/0001.png"), Request("s3:ListBucket", obj, {"s3:prefix": "holdout/"})],
            {},
        ),
    }  # fmt: skip
    for principal, (identity, requests, extra) in calls.items():
        for request in requests:
            context = {**_as(principal, **extra), **request.context}
            made = Request(request.action, request.resource, context)
            assert resource_policy_allows(policy, principal, identity, made), (principal, request)
    server = f"arn:aws:iam::{ACCOUNT}:role/mlflow-server-x-ServerRole-ABC"
    writes = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:PutObject",
                                                      "Resource": f"{obj}/mlflow-artifacts/*"}]}  # fmt: skip
    tagged = _as(server, **{"aws:PrincipalTag/gpu-runner:bucket": bucket})
    artifact = Request("s3:PutObject", f"{obj}/mlflow-artifacts/1/r/artifacts/m", tagged)
    assert resource_policy_allows(policy, server, [writes], artifact)
    assert not resource_policy_allows(
        policy, server, [writes], Request(artifact.action, artifact.resource, _as(server))
    )
    for admin in (f"arn:aws:iam::{ACCOUNT}:user/moto", f"arn:aws:iam::{ACCOUNT}:root"):
        for request in _requests(bucket, "holdout/0/0001.png", _as(admin)):
            assert resource_policy_allows(policy, admin, [EVERYTHING], request), (admin, request)
    # A service principal acting itself (S3 replication, logging) is not refused by this Deny.
    service = {**_as("logging.s3.amazonaws.com"), "aws:PrincipalIsAWSService": "true"}
    assert resource_policy_allows(policy, "logging.s3.amazonaws.com", [EVERYTHING],
                                  Request("s3:PutObject", f"{obj}/logs/x", service))  # fmt: skip


def test_runner_credentials_used_outside_the_stacks_vpc_are_refused(stack: dict[str, Any]) -> None:
    """Attack: training code sends the instance's role credentials out and uses them from elsewhere. They carry
    their session (ec2:SourceInstanceARN, aws:Ec2InstanceSourceVpc = the VPC they were delivered to: IAM User
    Guide, "AWS global condition context keys") but the request carries aws:SourceVpc only through a VPC
    endpoint, of the VPC it came from: from the internet (none) or another VPC's endpoint, refused."""
    session, bucket = stack["session"], stack["bucket"]
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in session.client("cloudformation").describe_stacks(
        StackName=stack["name"])["Stacks"][0]["Parameters"]}  # fmt: skip
    assert parameters["S3GatewayEndpoint"] in {"create", "existing"}, parameters["S3GatewayEndpoint"]
    vpc = parameters["VpcId"]
    role = session.client("iam").get_role(RoleName=runner_role_name(stack))["Role"]
    identity = managed_policies(session, role["RoleName"])
    instance = "i-0aaaaaaaaaaaaaaaa"
    taken = _as(role["Arn"], **{"aws:userid": f"{role['RoleId']}:{instance}",
                                "ec2:SourceInstanceARN": f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance}",
                                "aws:Ec2InstanceSourceVpc": vpc})  # fmt: skip
    policy = _bucket_policy(stack)
    for key in ("data/digits/0/0001.png", f"checkpoints/{taken['aws:userid']}/train-x/abc/state.json"):
        request = Request("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}", taken)
        assert resource_policy_allows(
            policy, role["Arn"], identity, _with(request, {"aws:SourceVpc": vpc})
        ), key
        assert not resource_policy_allows(policy, role["Arn"], identity, request), f"from the internet: {key}"
        other = _with(request, {"aws:SourceVpc": "vpc-0123456789abcdef0"})
        assert not resource_policy_allows(policy, role["Arn"], identity, other), f"from another VPC: {key}"
    # S3 acting for the instance (a call to KMS, say) is not refused: aws:ViaAWSService.
    via = _with(
        Request("s3:GetObject", f"arn:aws:s3:::{bucket}/data/x", taken), {"aws:ViaAWSService": "true"}
    )
    assert resource_policy_allows(policy, role["Arn"], identity, via)


def _with(request: Request, more: dict[str, str]) -> Request:
    return Request(request.action, request.resource, {**request.context, **more})


# --- what bootstrap passes the stack (bucket_access.py), against moto ------------------------------------------


def test_bootstrap_admits_its_caller_and_keeps_the_administrators_it_has(moto_endpoint: str) -> None:
    sts, iam = boto3.client("sts", region_name=REGION), boto3.client("iam", region_name=REGION)
    me = bucket_access.caller_principal(sts, iam)
    assert me == f"arn:aws:iam::{ACCOUNT}:user/moto"  # moto's default identity, an IAM user
    assert bucket_access.administrators("", me) == me
    before = f"arn:aws:iam::{ACCOUNT}:role/Admin"
    assert bucket_access.administrators(f"{before},{me}", me) == f"{before},{me}"
    # A role session: the role's ARN with its path (aws:PrincipalArn of a role session).
    role = iam.create_role(RoleName="PlatformAdmin", Path="/people/",
                           AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}))["Role"]  # fmt: skip
    credentials = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="alice")["Credentials"]
    as_admin = boto3.client("sts", region_name=REGION, aws_access_key_id=credentials["AccessKeyId"],
                            aws_secret_access_key=credentials["SecretAccessKey"],
                            aws_session_token=credentials["SessionToken"])  # fmt: skip
    assert (
        bucket_access.caller_principal(as_admin, iam) == f"arn:aws:iam::{ACCOUNT}:role/people/PlatformAdmin"
    )


def test_bootstrap_creates_the_vpcs_s3_endpoint_or_keeps_to_the_one_it_has(moto_endpoint: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    tables = sorted(t["RouteTableId"] for t in ec2.describe_route_tables(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"])  # fmt: skip
    assert bucket_access.s3_endpoint_plan(ec2, REGION, vpc, "none") == ("create", ",".join(tables))
    # The stack's own endpoint, on a later bootstrap: kept (and on the VPC's route tables of now).
    assert bucket_access.s3_endpoint_plan(ec2, REGION, vpc, "create") == ("create", ",".join(tables))
    ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.s3", VpcEndpointType="Gateway",
                            RouteTableIds=tables)  # fmt: skip
    assert bucket_access.s3_endpoint_plan(ec2, REGION, vpc, "none") == ("existing", "")
