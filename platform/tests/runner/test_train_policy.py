"""The launch (train) role's policy: the lifecycle run with exactly the permissions it grants, and the launches it
refuses."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpu_runner import cli
from gpu_runner.core.naming import RunContext
from gpu_runner.ec2_runner import lifecycle
from gpu_runner.mlflow_server import mlflow_wake
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, GitHubDouble
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    authorizations,
    role_policies,
    spot_role_exists,
    wire_settings,
)
from gpu_runner_testing.iam_requests import (
    SPOT_ROLE_ARN,
    SPOT_SERVICE,
    Call,
    Request,
    allowed,
    granted_actions,
    requests_for,
)

# A tag key launch never writes (one a reaper or an operator might trust).
EXTRA_TAG = {"Key": "gpu-runner:keep-until", "Value": "2099-01-01T00:00:00Z"}


def test_train_jobs_need_exactly_the_train_policy(
    stack: dict[str, Any],
    settings_file: Path,
    recorded: tuple[list[Call], boto3.Session],
    workflow_env: dict[str, str],
    github_double: GitHubDouble,
    tmp_path: Path,
) -> None:
    calls, _ = recorded
    wire_settings(stack, settings_file)
    base = ["--settings", str(settings_file)]
    assert cli.main([*base, "launch", "--spot", "true"]) == 0
    out = dict(line.split("=", 1) for line in (tmp_path / "out").read_text().splitlines())
    github_double.online_after(int(out["runner-id"]), polls=1)
    ids = ["--region", out["region"], "--instance-id", out["instance-id"]]
    assert cli.main([*base, "wait", *ids, "--runner-id", out["runner-id"]]) == 0
    # A wait that times out prints the console output (ec2:GetConsoleOutput).
    assert cli.main([*base, "wait", *ids, "--runner-id", "999999", "--timeout", "0.1"]) == 1
    assert (
        cli.main([*base, "teardown", *ids, "--runner-id", out["runner-id"], "--parameter", out["parameter"]])
        == 0
    )
    resume = ["--ref", "train/infra", "--attempt", "1", "--commit", "a" * 40, "--train-interrupted", ""]
    assert cli.main([*base, "resume", *resume, *ids]) == 0
    # Before a launch, the start job wakes the team MLflow server its schedule stopped.
    _stopped_mlflow_server(stack)
    assert cli.main([*base, "mlflow-server", "wake"]) == 0

    requests = authorizations(calls)
    train_policy = role_policies(stack, "TrainRoleArn")
    denied = [r for r in requests if not allowed(train_policy, r)]
    assert denied == [], denied
    used = {r.action for r in requests}
    # Exactly: every granted action is needed. In an account that already has AWSServiceRoleForEC2Spot, EC2 would
    # not need iam:CreateServiceLinkedRole for the spot launch (moto's account has none).
    assert not spot_role_exists()
    assert granted_actions(train_policy) == used, sorted(used)
    assert {c.operation for c in calls} >= {
        "DescribeInstanceTypeOfferings",
        "DescribeSubnets",
        "RunInstances",
        "TerminateInstances",
        "GetConsoleOutput",
        "PutParameter",
        # Teardown prices the spot instance it terminated: on-demand (to compare) and the zone's spot history.
        "GetProducts",
        "DescribeSpotPriceHistory",
        "StartInstances",
    }


def _stopped_mlflow_server(stack: dict[str, Any]) -> None:
    """A team MLflow server stopped by its schedule, with the mark of its last boot (made with a session of its
    own, so these calls are not the train role's). test_mlflow_server.py's stack may already have made one."""
    session = boto3.Session(region_name=REGION)
    ec2, ssm = session.client("ec2"), session.client("ssm")
    settings = stack["settings"]
    server = mlflow_wake.find_server(ec2, settings.project)
    if server is None:
        tags = [{"Key": mlflow_wake.PROJECT_TAG, "Value": settings.project}]
        instance_id = ec2.run_instances(
            ImageId=stack["amazon_image"], InstanceType="t3.small", MinCount=1, MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )["Instances"][0]["InstanceId"]  # fmt: skip
    else:
        instance_id = server.instance_id
    ec2.stop_instances(InstanceIds=[instance_id])
    ssm.put_parameter(Name=mlflow_wake.ready_parameter(settings.ssm_prefix), Type="String",
                      Value="http://10.0.0.9:5000", Overwrite=True)  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"TagSpecifications": []}, id="untagged"),
        pytest.param({"InstanceType": "p5.48xlarge"}, id="instance-type-not-allowed"),
        pytest.param({"MetadataOptions": {"HttpTokens": "optional"}}, id="imdsv1"),
        pytest.param({"IamInstanceProfile": {"Name": "admin-profile"}}, id="other-instance-profile"),
        pytest.param({"BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"Encrypted": False}}]}, id="unencrypted"),
        # A tag key launch never writes, on the instance or on its volume.
        pytest.param({"extra_tag_on": "instance"}, id="extra-instance-tag-key"),
        pytest.param({"extra_tag_on": "volume"}, id="extra-volume-tag-key"),
    ],
)  # fmt: skip
def test_train_policy_refuses_launches_outside_its_limits(
    stack: dict[str, Any], change: dict[str, Any]
) -> None:
    policy = role_policies(stack, "TrainRoleArn")
    assert all(allowed(policy, r) for r in _launch_requests(stack)), "the unchanged launch must be allowed"
    assert not all(allowed(policy, r) for r in _launch_requests(stack, **change))


@pytest.mark.parametrize(
    "attack",
    [
        "subnet-of-another-vpc",
        "group-of-another-vpc",
        "vpc-default-group",
        "no-group",
        "image-of-another-owner",
    ],
)
def test_train_policy_keeps_launches_in_the_stack_network_and_images(
    stack: dict[str, Any], attack: str
) -> None:
    """Issue 13, item 9: the launch role may use only the stack's security group, subnets of its VPC and images
    of the expected owners. The role's holder chooses every RunInstances parameter, so each is checked by IAM."""
    policy = role_policies(stack, "TrainRoleArn")
    assert all(allowed(policy, r) for r in _launch_requests(stack)), "the unchanged launch must be allowed"
    other = _other_network(stack)
    change = {
        "subnet-of-another-vpc": {"SubnetId": other["subnet"]},
        "group-of-another-vpc": {"SecurityGroupIds": [other["group"]]},
        "vpc-default-group": {"SecurityGroupIds": [other["default_group"]]},
        "no-group": {"SecurityGroupIds": ["*"]},  # EC2 then picks the VPC's default group
        "image-of-another-owner": {"ImageId": other["image"]},
    }[attack]
    denied = [r for r in _launch_requests(stack, **change) if not allowed(policy, r)]
    kind = {"subnet-of-another-vpc": "subnet", "image-of-another-owner": "image"}.get(
        attack, "security-group"
    )
    assert [r.resource.split(":")[-1].split("/")[0] for r in denied] in (
        [kind],
        ["subnet", "network-interface"],
    )


@pytest.mark.parametrize(
    ("action", "resource", "context"),
    [
        ("ec2:TerminateInstances", f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0", {}),
        ("ec2:TerminateInstances", f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0",
         {"ec2:ResourceTag/gpu-runner:managed-by": "gpu-runner", "ec2:ResourceTag/gpu-runner:project": "other"}),
        ("ec2:CreateTags", f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0", {}),
        ("ssm:PutParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter/other/jitconfig", {}),
        ("ssm:GetParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter/gpu-runner/octo-org/octo-repo/1-1/jitconfig", {}),
        ("iam:PassRole", "arn:aws:iam::123456789012:role/admin", {"iam:PassedToService": "ec2.amazonaws.com"}),
        ("s3:GetObject", "arn:aws:s3:::any-bucket/key", {}),
    ],
    ids=["terminate-untagged", "terminate-other-project", "tag-after-launch", "parameter-outside-prefix",
         "read-jit-config", "pass-other-role", "s3"],
)  # fmt: skip
def test_train_policy_refuses_everything_else(
    stack: dict[str, Any], action: str, resource: str, context: dict[str, str]
) -> None:
    policy = role_policies(stack, "TrainRoleArn")
    assert not allowed(policy, Request(action, resource, context))


def test_an_extra_tag_key_is_refused_on_every_authorization_that_carries_tags(stack: dict[str, Any]) -> None:
    """RunInstances with one tag key more than launch writes: the instance (or volume) and its CreateTags are
    refused, whatever the values. Before the aws:TagKeys condition, the whole launch was allowed."""
    policy = role_policies(stack, "TrainRoleArn")
    for kind in ("instance", "volume"):
        requests = _launch_requests(stack, extra_tag_on=kind)
        denied = [r for r in requests if not allowed(policy, r)]
        refused = {(r.action, r.resource.split(":")[-1].split("/")[0]) for r in denied}
        assert refused == {("ec2:RunInstances", kind), ("ec2:CreateTags", kind)}, refused


def test_the_tag_keys_the_policy_allows_are_exactly_those_launch_writes(stack: dict[str, Any]) -> None:
    """One list per statement in the template; launch's keys (lifecycle.instance_tags) must equal each."""
    ctx = RunContext(DEFAULT_REPOSITORY, "1", "1", "train/x", "a" * 40)
    written = set(lifecycle.instance_tags(stack["settings"], ctx, runner_id=1, expires_at=datetime.now(UTC)))
    (document,) = role_policies(stack, "TrainRoleArn")
    lists = {
        s["Sid"]: set(s["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"])
        for s in document["Statement"]
        if "ForAllValues:StringEquals" in s.get("Condition", {})
    }
    assert set(lists) == {"LaunchTaggedInstances", "LaunchTaggedEncryptedVolumes", "TagOnlyAtLaunch"}
    assert all(keys == written for keys in lists.values()), (lists, written)


@pytest.mark.parametrize("role", ["TrainRoleArn", "ReaperRoleArn"])
def test_only_instances_of_this_stacks_profile_can_be_terminated(stack: dict[str, Any], role: str) -> None:
    """Our tags are copyable by anyone who may tag; the instance profile is not. Another stack's profile (another
    repository with the same project slug), or none: refused. Before, the tags alone sufficed."""
    policy = role_policies(stack, role)
    iam = stack["session"].client("iam")
    name = stack["outputs"]["RunnerInstanceProfile"]
    profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Arn"]
    tags = {"ec2:ResourceTag/gpu-runner:managed-by": "gpu-runner",
            "ec2:ResourceTag/gpu-runner:project": stack["settings"].project}  # fmt: skip
    instance = f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0"
    terminate = "ec2:TerminateInstances"
    assert allowed(policy, Request(terminate, instance, {**tags, "ec2:InstanceProfile": profile}))
    other = "arn:aws:iam::123456789012:instance-profile/gpu-runner-demo-0badc0de-RunnerInstanceProfile-X"
    assert not allowed(policy, Request(terminate, instance, {**tags, "ec2:InstanceProfile": other}))
    assert not allowed(policy, Request(terminate, instance, tags))


def test_train_policy_may_create_only_the_spot_service_linked_role(stack: dict[str, Any]) -> None:
    policy = role_policies(stack, "TrainRoleArn")
    create = "iam:CreateServiceLinkedRole"
    assert allowed(policy, Request(create, SPOT_ROLE_ARN, {"iam:AWSServiceName": SPOT_SERVICE}))
    # Another service's role, or the spot role's path asked for another service: refused.
    other = "arn:aws:iam::123456789012:role/aws-service-role/elasticbeanstalk.amazonaws.com/AWSServiceRoleForElasticBeanstalk"
    assert not allowed(
        policy, Request(create, other, {"iam:AWSServiceName": "elasticbeanstalk.amazonaws.com"})
    )
    assert not allowed(policy, Request(create, SPOT_ROLE_ARN, {"iam:AWSServiceName": "ec2.amazonaws.com"}))
    assert not allowed(policy, Request(create, SPOT_ROLE_ARN))
    # And the reaper role may not create any.
    reaper = role_policies(stack, "ReaperRoleArn")
    assert not allowed(reaper, Request(create, SPOT_ROLE_ARN, {"iam:AWSServiceName": SPOT_SERVICE}))


def test_a_spot_launch_needs_the_service_linked_role_only_while_it_is_missing(stack: dict[str, Any]) -> None:
    """EC2 creates AWSServiceRoleForEC2Spot during the account's first spot RunInstances, as the caller."""
    spot = {"InstanceMarketOptions": {"MarketType": "spot"}}
    missing = {r.action for r in _launch_requests(stack, **spot)}
    assert "iam:CreateServiceLinkedRole" in missing
    assert "iam:CreateServiceLinkedRole" not in {r.action for r in _launch_requests(stack)}
    params = {"ImageId": "ami-12345678", "InstanceType": "g5.xlarge", **spot}
    call = Call("ec2", "RunInstances", REGION, params)
    present = requests_for(call, instance_tags=lambda *_: {}, profile_role=str, spot_role_exists=lambda: True)
    assert "iam:CreateServiceLinkedRole" not in {r.action for r in present}


def test_unknown_api_calls_are_not_waved_through(stack: dict[str, Any]) -> None:
    with pytest.raises(KeyError, match="no IAM mapping for ec2:StopInstances"):
        authorizations([Call("ec2", "StopInstances", REGION, {"InstanceIds": ["i-1"]})])


def _launch_requests(stack: dict[str, Any], extra_tag_on: str = "", **changes: Any) -> list[Request]:
    """The authorizations of one RunInstances as launch makes it (all of its tags), with one detail changed:
    `extra_tag_on` adds EXTRA_TAG to that resource type's tags."""
    profile = stack["outputs"]["RunnerInstanceProfile"]
    ec2 = stack["session"].client("ec2")
    amazon_image = stack["amazon_image"]
    default_subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])[
        "Subnets"
    ][0]
    ctx = RunContext(DEFAULT_REPOSITORY, "9090", "1", "train/infra", "a" * 40)
    launch_tags = lifecycle.instance_tags(
        stack["settings"], ctx, runner_id=42, expires_at=datetime(2026, 12, 1, tzinfo=UTC)
    )
    tags = [{"Key": k, "Value": v} for k, v in launch_tags.items()]
    specs = [
        {"ResourceType": kind, "Tags": [*tags, EXTRA_TAG] if kind == extra_tag_on else tags}
        for kind in ("instance", "volume")
    ]
    params: dict[str, Any] = {
        "ImageId": amazon_image, "InstanceType": "g5.xlarge", "MetadataOptions": {"HttpTokens": "required"},
        "IamInstanceProfile": {"Name": profile}, "SubnetId": default_subnet["SubnetId"],
        "SecurityGroupIds": [stack["outputs"]["RunnerSecurityGroupId"]],
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"Encrypted": True}}],
        "TagSpecifications": specs,
    }  # fmt: skip
    params.update(changes)
    return authorizations([Call("ec2", "RunInstances", REGION, params)])


def _other_network(stack: dict[str, Any]) -> dict[str, str]:
    """Resources a launch must not use: a VPC of its own with a subnet and a group, the default VPC's default
    group, and an image this account registered (not one of the expected owners)."""
    ec2 = stack["session"].client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName=f"other-{vpc}", Description="other", VpcId=vpc)["GroupId"]
    default_group = ec2.describe_security_groups(
        Filters=[
            {"Name": "group-name", "Values": ["default"]},
            {"Name": "vpc-id", "Values": [stack_vpc(stack)]},
        ]
    )["SecurityGroups"][0]["GroupId"]
    source = stack["amazon_image"]
    image = ec2.copy_image(Name=f"own-{vpc}", SourceImageId=source, SourceRegion=REGION)["ImageId"]
    return {"subnet": subnet, "group": group, "default_group": default_group, "image": image}


def stack_vpc(stack: dict[str, Any]) -> str:
    group = stack["outputs"]["RunnerSecurityGroupId"]
    return (
        stack["session"]
        .client("ec2")
        .describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["VpcId"]
    )
