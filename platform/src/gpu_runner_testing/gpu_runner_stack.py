"""The stack the infra tests deploy: gpu_runner/setup/gpu-runner.yaml read with CloudFormation's short tags, the stack
`gpu-runner bootstrap` deploys to the moto server (session-scoped fixtures, registered by runner_fixtures.py),
its roles' policies, and the authorizations of the AWS calls a command made (moved from test_stack.py)."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from gpu_runner import cli
from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import load_settings
from gpu_runner_testing import live_instances, stack_deploy
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, DEFAULT_TOKEN, GitHubDouble
from gpu_runner_testing.iam_requests import (
    SPOT_ROLE_ARN,
    Call,
    Request,
    launched_profiles,
    record_calls,
    requests_for,
)
from gpu_runner_testing.stack_deploy import OIDC_URL, TEMPLATE

# A region of its own: reading AWS's public parameters makes moto list them beside ours in that region, which
# the other runner tests (counting what is left under their prefix) must not see.
REGION = "ca-central-1"


PUBLIC_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-x86_64-gp2"
# Who runs the fixture's bootstrap, as IAM names it (aws:PrincipalArn): the only principal the GitHub credential's
# key lets encrypt. Given with --credential-writer-arn, since moto's own caller (arn:aws:sts::...:user/moto) is no
# form AWS uses; test_stack_bootstrap derives it from a real assumed role instead.
CREDENTIAL_WRITER = "arn:aws:iam::123456789012:role/ops/gpu-runner-admin"


class CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (!Ref, !Sub, ...) read as their long form."""


def _intrinsic(loader: CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


CfnLoader.add_multi_constructor("!", _intrinsic)


def template() -> dict[str, Any]:
    return yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=CfnLoader)


def write_settings(path: Path) -> Path:
    """A settings file with a project of its own: the stack name (gpu-runner-<project>-<hash>) is unique to it."""
    path.write_text(
        yaml.safe_dump(
            {
                "project": f"infra-{uuid.uuid4().hex[:8]}",
                "region": REGION,
                "instance_types": ["g4dn.xlarge", "g5.xlarge"],
                "ami_parameter": PUBLIC_AMI_PARAMETER,
                "ssm_prefix": f"/gpu-runner/{DEFAULT_REPOSITORY}",
                "wait_timeout_seconds": 5,
            }
        )
    )
    return path


# One stack per test process, shared by the seven infra modules: deploying it is the slow part (3-6 s each time,
# measured 2026-12-01), and the tests only read it (the re-run updates it with the same input). What a test
# launches with it, `recorded` ends and clears.
@pytest.fixture(scope="session")
def settings_file(tmp_path_factory: pytest.TempPathFactory, ami_for_infra: str) -> Path:
    return write_settings(tmp_path_factory.mktemp("infra") / "gpu-runner.yaml")


@pytest.fixture(scope="session")
def ami_for_infra(moto_endpoint: str) -> str:
    """The AMI behind moto's copy of AWS's public Amazon Linux parameter (the policy allows /aws/service/*)."""
    session = boto3.Session(region_name=REGION)
    ami_id = session.client("ssm").get_parameter(Name=PUBLIC_AMI_PARAMETER)["Parameter"]["Value"]
    # Raises (InvalidAMIID.NotFound) if moto ever stops shipping that image: the launch below needs it.
    assert session.client("ec2").describe_images(ImageIds=[ami_id])["Images"], ami_id
    return ami_id


@pytest.fixture(scope="session")
def stack(
    settings_file: Path,
    oidc_provider: str,
    tmp_path_factory: pytest.TempPathFactory,
    amazon_image: Callable[[str], str],
) -> Iterator[dict[str, Any]]:
    """`gpu-runner bootstrap` as a user runs it (reusing the account's OIDC provider, with the immutable ids),
    storing the GitHub credential in AWS and setting the repository's OIDC subject template (GitHub double)."""
    bucket = f"infra-test-{uuid.uuid4().hex[:12]}"
    settings = load_settings(settings_file)
    token_file = tmp_path_factory.mktemp("credential") / "pat"
    token_file.write_text(DEFAULT_TOKEN + "\n")
    with GitHubDouble() as double:
        deployed = stack_deploy.bootstrap(
            settings_file, project=settings.project, region=REGION, repository=DEFAULT_REPOSITORY, bucket=bucket,
            oidc_provider=oidc_provider,
            extra=("--owner-id", "1001", "--repository-id", "2002", "--token-file", str(token_file),
                   "--credential-writer-arn", CREDENTIAL_WRITER),
            github_env={"GITHUB_TOKEN": DEFAULT_TOKEN, "GITHUB_API_URL": double.url},
        )  # fmt: skip
        oidc_sub = dict(double.oidc_sub[DEFAULT_REPOSITORY.lower()])
        assert double.take_violations() == []
    session = boto3.Session(region_name=REGION)
    yield {"argv": deployed.argv, "printed": deployed.printed, "outputs": deployed.outputs, "settings": settings,
           "bucket": bucket, "session": session, "oidc": oidc_provider, "name": deployed.stack_name,
           "oidc_sub": oidc_sub, "amazon_image": amazon_image(REGION)}  # fmt: skip
    # Best effort: moto deletes a stack's resources in template order, so a role with an attached policy
    # refuses (DeleteConflict). Names are unique per session, so a leftover stack cannot affect another test.
    with contextlib.suppress(ClientError):
        session.client("cloudformation").delete_stack(StackName=deployed.stack_name)


def role_of(session: boto3.Session, arn: str) -> dict[str, Any]:
    return session.client("iam").get_role(RoleName=arn.rsplit("/", 1)[-1])["Role"]


def managed_policies(session: boto3.Session, role_name: str) -> list[dict[str, Any]]:
    iam = session.client("iam")
    documents = []
    for attached in iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]:
        policy = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]
        version = iam.get_policy_version(PolicyArn=policy["Arn"], VersionId=policy["DefaultVersionId"])
        documents.append(version["PolicyVersion"]["Document"])
    return documents


def role_policies(stack: dict[str, Any], output: str) -> list[dict[str, Any]]:
    """The managed policies of the role a stack output names (TrainRoleArn, ReaperRoleArn)."""
    return managed_policies(stack["session"], stack["outputs"][output].rsplit("/", 1)[-1])


def runner_role_name(stack: dict[str, Any]) -> str:
    profile = (
        stack["session"]
        .client("iam")
        .get_instance_profile(InstanceProfileName=stack["outputs"]["RunnerInstanceProfile"])
    )
    return profile["InstanceProfile"]["Roles"][0]["RoleName"]


def deployed_bucket_policy(stack: dict[str, Any]) -> dict[str, Any]:
    """The bucket policy as CloudFormation puts it for the deployed stack: moto's CloudFormation skips
    AWS::S3::BucketPolicy (its parser has no such resource type, moto 5.2.5), so the template's document is
    evaluated here with the stack's deployed parameters and resources (the role ARNs IAM holds, the bucket's)."""
    session, name = stack["session"], stack["name"]
    cfn, iam = session.client("cloudformation"), session.client("iam")
    described = cfn.describe_stacks(StackName=name)["Stacks"][0]
    values: dict[str, Any] = {p["ParameterKey"]: p.get("ParameterValue", "") for p in described["Parameters"]}
    values |= {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": "123456789012",
               "AWS::StackName": name, "AWS::NoValue": _NO_VALUE}  # fmt: skip
    attributes: dict[str, str] = {}
    for resource in cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]:
        logical, physical = resource["LogicalResourceId"], resource.get("PhysicalResourceId", "")
        values[logical] = physical
        if resource["ResourceType"] == "AWS::IAM::Role":
            attributes[f"{logical}.Arn"] = iam.get_role(RoleName=physical)["Role"]["Arn"]
        elif resource["ResourceType"] == "AWS::S3::Bucket":
            attributes[f"{logical}.Arn"] = f"arn:aws:s3:::{physical}"
    body = template()
    conditions: dict[str, bool] = {}
    for condition, expression in body["Conditions"].items():
        conditions[condition] = bool(_evaluate(expression, values, attributes, conditions))
    document = body["Resources"]["BucketTlsOnlyPolicy"]["Properties"]["PolicyDocument"]
    return dict(_evaluate(document, values, attributes, conditions))


_NO_VALUE = object()


def _evaluate(
    node: Any, values: dict[str, Any], attributes: dict[str, str], conditions: dict[str, bool]
) -> Any:
    """CloudFormation's intrinsic functions the bucket policy and the conditions use (AWS CloudFormation User
    Guide, "Intrinsic function reference"); any other raises."""
    if isinstance(node, list):
        return [
            v
            for v in (_evaluate(item, values, attributes, conditions) for item in node)
            if v is not _NO_VALUE
        ]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((key, arg),) = node.items()

        def sub(text: str, extra: dict[str, Any]) -> str:
            def one(match: Any) -> str:
                name = match.group(1)
                if name.startswith("!"):
                    return "${" + name[1:] + "}"  # Fn::Sub's escape for a literal ${
                return str({**values, **attributes, **extra}[name])

            return re.sub(r"\$\{([^}]+)\}", one, text)

        if key == "Ref":
            return values[arg]
        if key == "Fn::GetAtt":
            return attributes[".".join(arg)]
        if key == "Fn::Sub":
            if isinstance(arg, str):
                return sub(arg, {})
            text, variables = arg
            return sub(text, {k: _evaluate(v, values, attributes, conditions) for k, v in variables.items()})
        if key == "Fn::Split":
            delimiter, text = arg
            return str(_evaluate(text, values, attributes, conditions)).split(delimiter)
        if key == "Fn::If":
            name, then, otherwise = arg
            return _evaluate(then if conditions[name] else otherwise, values, attributes, conditions)
        if key == "Fn::Equals":
            left, right = (_evaluate(side, values, attributes, conditions) for side in arg)
            return left == right
        if key == "Fn::Not":
            return not _evaluate(arg[0], values, attributes, conditions)
        if key == "Fn::And":
            return all(_evaluate(item, values, attributes, conditions) for item in arg)
        if key.startswith("Fn::") or key == "Condition":
            raise ValueError(f"{key} is not evaluated here: add it to gpu_runner_stack._evaluate")
    return {k: _evaluate(v, values, attributes, conditions) for k, v in node.items()}


def assumed_session(role_arn: str, session_name: str) -> boto3.Session:
    """A session of `role_arn` named `session_name`, from moto's AssumeRole (which checks no trust policy): its
    GetCallerIdentity answers UserId "<role id>:<session name>" and the assumed-role ARN, as AWS does."""
    sts = boto3.Session(region_name=REGION).client("sts")
    credentials = sts.assume_role(RoleArn=role_arn, RoleSessionName=session_name)["Credentials"]
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=REGION,
    )


def instance_session(stack: dict[str, Any], instance_id: str) -> boto3.Session:
    """The runner role's session on instance `instance_id`: aws:userid "<role id>:<instance id>", what IAM gives
    "a role assigned to an Amazon EC2 instance" (IAM User Guide, "IAM policy elements: Variables and tags")."""
    role = stack["session"].client("iam").get_role(RoleName=runner_role_name(stack))["Role"]
    return assumed_session(role["Arn"], instance_id)


def stack_vpc(stack: dict[str, Any]) -> str:
    """The VPC the stack's runners launch into (its VpcId parameter, as bootstrap deployed it)."""
    described = (
        stack["session"].client("cloudformation").describe_stacks(StackName=stack["name"])["Stacks"][0]
    )
    return next(p["ParameterValue"] for p in described["Parameters"] if p["ParameterKey"] == "VpcId")


def caller_context(session: boto3.Session, vpc: str = "") -> dict[str, str]:
    """The request context keys of `session`'s caller: aws:userid (GetCallerIdentity's UserId), aws:PrincipalArn
    (for a role session the role's ARN, "not the ARN of the assumed-role session": IAM User Guide, "AWS global
    condition context keys"), and for an instance's session (named like one) ec2:SourceInstanceARN; with `vpc`, a
    request made on the instance through its VPC's S3 endpoint: aws:Ec2InstanceSourceVpc (where the credentials
    were delivered) and aws:SourceVpc (where the request came from), both that VPC (same page)."""
    identity = session.client("sts").get_caller_identity()
    context = {"aws:userid": identity["UserId"], "aws:PrincipalArn": identity["Arn"]}
    kind, _, rest = identity["Arn"].partition(":assumed-role/")
    if rest:
        role, _, name = rest.partition("/")
        context["aws:PrincipalArn"] = f"{kind.replace(':sts:', ':iam:')}:role/{role}"
        if name.startswith("i-"):
            context["ec2:SourceInstanceARN"] = f"arn:aws:ec2:{REGION}:{identity['Account']}:instance/{name}"
            if vpc:
                context |= {"aws:Ec2InstanceSourceVpc": vpc, "aws:SourceVpc": vpc}
    return context


def as_caller(requests: list[Request], session: boto3.Session, vpc: str = "") -> list[Request]:
    """`requests` as `session`'s caller makes them (its identity keys added to each context)."""
    caller = caller_context(session, vpc)
    return [Request(r.action, r.resource, {**r.context, **caller}, r.call) for r in requests]


def _trust_subjects(role: dict[str, Any]) -> tuple[str, list[str]]:
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"]["StringEquals"] == {f"{OIDC_URL}:aud": "sts.amazonaws.com"}
    assert set(statement["Condition"]) == {"StringEquals", "StringLike"}
    return statement["Principal"]["Federated"], statement["Condition"]["StringLike"][f"{OIDC_URL}:sub"]


@pytest.fixture
def recorded(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[list[Call], boto3.Session]]:
    """Every AWS call the gpu-runner CLI makes, through a session the CLI gets instead of its default one."""
    session = boto3.Session(region_name=REGION)
    before = live_instances.live_ids(session.client("ec2"))
    calls = record_calls(session)
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    yield calls, session
    live_instances.terminate_started_since(session.client("ec2"), before)
    # And the JIT configs of launches no teardown followed (test_runner_policy's two concurrent runs): the stacks
    # of all these modules share the prefix, so another module's reaper would count them (it asserts how many it
    # deletes). Since test_stack.py was split, modules run in any order on a worker.
    ssm = boto3.Session(region_name=REGION).client("ssm")
    pages = ssm.get_paginator("get_parameters_by_path").paginate(
        Path=f"/gpu-runner/{DEFAULT_REPOSITORY}", Recursive=True
    )
    for name in [p["Name"] for page in pages for p in page["Parameters"] if p["Name"].endswith("/jitconfig")]:
        ssm.delete_parameter(Name=name)


def authorizations(calls: list[Call], history: list[Call] | None = None) -> list[Request]:
    """The authorizations of `calls`; `history` (default: `calls`) holds the launches whose instances they act on."""
    # Look-ups through a session of their own: the recorded one must hold only gpu-runner's calls.
    lookup = boto3.Session(region_name=REGION)
    iam = lookup.client("iam")

    def described(region: str, instance_id: str) -> dict[str, Any]:
        reservations = lookup.client("ec2", region_name=region).describe_instances(InstanceIds=[instance_id])
        return reservations["Reservations"][0]["Instances"][0]

    def instance_tags(region: str, instance_id: str) -> dict[str, str]:
        return {t["Key"]: t["Value"] for t in described(region, instance_id).get("Tags", [])}

    launched = launched_profiles(calls if history is None else history)

    def instance_profile(region: str, instance_id: str) -> str:
        # moto forgets a terminated instance's profile; EC2 checks it at call time.
        if instance_id in launched:
            return launched[instance_id]
        return str(described(region, instance_id).get("IamInstanceProfile", {}).get("Arn", ""))

    def profile_role(profile_arn: str) -> str:
        try:
            profile = iam.get_instance_profile(InstanceProfileName=profile_arn.rsplit("/", 1)[-1])
        except iam.exceptions.NoSuchEntityException:
            return "arn:aws:iam::123456789012:role/not-ours"
        return profile["InstanceProfile"]["Roles"][0]["Arn"]

    def image_owner(region: str, image_id: str) -> str:
        images = lookup.client("ec2", region_name=region).describe_images(
            Filters=[{"Name": "image-id", "Values": [image_id]}]
        )["Images"]
        # Amazon's own images are "amazon" to ec2:Owner, whatever account id publishes them.
        return (images[0].get("ImageOwnerAlias") or images[0]["OwnerId"]) if images else ""

    def subnet_vpc(region: str, subnet_id: str | None) -> str:
        ec2 = lookup.client("ec2", region_name=region)
        if subnet_id is None:  # no subnet: EC2 takes a default subnet of the default VPC
            vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
            return vpcs[0]["VpcId"] if vpcs else ""
        subnets = ec2.describe_subnets(Filters=[{"Name": "subnet-id", "Values": [subnet_id]}])["Subnets"]
        return subnets[0]["VpcId"] if subnets else ""

    return [
        r
        for call in calls
        for r in requests_for(
            call,
            instance_tags=instance_tags,
            profile_role=profile_role,
            spot_role_exists=spot_role_exists,
            image_owner=image_owner,
            subnet_vpc=subnet_vpc,
            instance_profile=instance_profile,
        )
    ]


def spot_role_exists() -> bool:
    """Whether the account (moto's) has AWSServiceRoleForEC2Spot, through a session of its own."""
    iam = boto3.Session(region_name=REGION).client("iam")
    try:
        iam.get_role(RoleName=SPOT_ROLE_ARN.rsplit("/", 1)[-1])
    except iam.exceptions.NoSuchEntityException:
        return False
    return True


def wire_settings(stack: dict[str, Any], path: Path) -> None:
    """What the bootstrap output tells the user to put in configs/gpu-runner.yaml."""
    raw = yaml.safe_load(path.read_text())
    raw["bucket"] = stack["outputs"]["BucketName"]  # in a real project set before bootstrap (its one source)
    raw["instance_profile"] = stack["outputs"]["RunnerInstanceProfile"]
    raw["security_group_ids"] = [stack["outputs"]["RunnerSecurityGroupId"]]
    # Two subnets of the default VPC (one per zone), as the README suggests for capacity failover: launch then
    # reads their zones (ec2:DescribeSubnets) to ask for offerings there.
    subnets = (
        stack["session"]
        .client("ec2")
        .describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    )
    raw["subnet_ids"] = sorted(s["SubnetId"] for s in subnets)[:2]
    path.write_text(yaml.safe_dump(raw))


@pytest.fixture
def workflow_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github_double: GitHubDouble
) -> dict[str, str]:
    env = {
        "GITHUB_REPOSITORY": DEFAULT_REPOSITORY, "GITHUB_RUN_ID": "9090", "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_REF_NAME": "train/infra", "GITHUB_SHA": "a" * 40, "GITHUB_API_URL": github_double.url,
        "GITHUB_TOKEN": DEFAULT_TOKEN, "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_WORKFLOW_REF": f"{DEFAULT_REPOSITORY}/.github/workflows/train.yml@refs/heads/train/infra",
        "GITHUB_EVENT_NAME": "push",
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # As in the workflows: no GitHub credential in the environment, gpu-runner reads it from SSM with the role.
    for key in ("GPU_RUNNER_TOKEN", "GPU_RUNNER_APP_ID", "GPU_RUNNER_APP_PRIVATE_KEY"):
        monkeypatch.delenv(key, raising=False)
    return env
