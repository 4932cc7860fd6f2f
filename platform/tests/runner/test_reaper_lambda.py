"""The AWS-side reaper (issue 13 item 12): the Lambda `gpu-runner bootstrap` deploys, run from the very package it
uploaded, against the moto server, with only what the Lambda Python runtime has (boto3, no PyGithub).

moto's CloudFormation creates the function (from the S3 object: CodeSha256 is moto's own hash of it), its roles,
policies and log group; it does not create AWS::Scheduler::Schedule (moto 5.2.5 warns "not supported by moto's
CloudFormation implementation" and skips it: checked below, so the day it does, this file says so). The schedule
is asserted on the template with the property names of the CloudFormation Template Reference
(AWS::Scheduler::Schedule: ScheduleExpression, FlexibleTimeWindow.Mode, State, Target.Arn, Target.RoleArn,
Target.RetryPolicy; read 2026-12-01), and cfn-lint checks it against CloudFormation's resource schema.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from parliament import analyze_policy_string

from gpu_runner import cli
from gpu_runner.core import naming
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings, load_settings
from gpu_runner.ec2_runner import lifecycle, reaper_lambda
from gpu_runner.setup import lambda_zip
from gpu_runner.setup.stack import stack_name
from gpu_runner_testing import live_instances, stack_deploy
from gpu_runner_testing.amazon_images import first_amazon_image
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.iam_requests import (
    ACCOUNT,
    Request,
    allowed,
    granted_actions,
    record_calls,
    requests_for,
)
from gpu_runner_testing.stack_deploy import TEMPLATE, TEST_PLATFORM

# A region of its own: every instance and parameter here belongs to this module.
REGION = "ap-southeast-2"
# What the runner package needs beyond boto3 (runner/pyproject.toml: pygithub and its requests, pyyaml, tenacity):
# none of it is in the Lambda runtime, so none of it may be imported on the handler's path.
NOT_IN_LAMBDA = ("github", "requests", "yaml", "tenacity")
# Lambda itself writes the function's logs with these, as the function's role ("Working with Lambda function logs").
RUNTIME_LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}


def test_each_reaper_policy_names_its_own_role() -> None:
    from gpu_runner_testing.gpu_runner_stack import template  # the CloudFormation-tag-aware loader

    resources = template()["Resources"]
    for policy, role in (
        ("ReaperFunctionPolicy", "ReaperFunctionRole"),
        ("ReaperSchedulePolicy", "ReaperScheduleRole"),
    ):
        assert resources[policy]["Properties"]["Roles"] == [{"Ref": role}]
    # Exactly one policy per role: nothing else grants these roles anything.
    named = [r["Properties"]["Roles"] for r in resources.values() if r["Type"] == "AWS::IAM::ManagedPolicy"]
    assert sum(roles.count({"Ref": "ReaperFunctionRole"}) for roles in named) == 1
    assert sum(roles.count({"Ref": "ReaperScheduleRole"}) for roles in named) == 1
    assert not [r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"]
    assert "Policies" not in resources["ReaperFunctionRole"]["Properties"]
    assert "ManagedPolicyArns" not in resources["ReaperFunctionRole"]["Properties"]


def test_bootstrap_deploys_the_function_from_the_package_it_built(stack: dict[str, Any]) -> None:
    config, settings = stack["function"], stack["settings"]
    data = lambda_zip.build_zip()
    assert config["Handler"] == lambda_zip.HANDLER == "gpu_runner.ec2_runner.reaper_lambda.handler"
    assert config["Runtime"] == "python3.13"
    assert config["CodeSha256"] == lambda_zip.code_sha256(data)
    assert data == lambda_zip.build_zip(), (
        "the package must be reproducible, or every bootstrap updates the stack"
    )
    assert function_env(stack) == {
        "GPU_RUNNER_PROJECT": settings.project, "GPU_RUNNER_REPOSITORY": DEFAULT_REPOSITORY,
        "GPU_RUNNER_SSM_PREFIX": settings.ssm_prefix, "GPU_RUNNER_INSTANCE_PROFILE": stack["profile_arn"],
        "GPU_RUNNER_MAX_RUNTIME_MINUTES": "60", "GPU_RUNNER_IDLE_TIMEOUT_MINUTES": "10",
        "GPU_RUNNER_WAIT_TIMEOUT_SECONDS": "5", "GPU_RUNNER_REAP_GRACE_MINUTES": "20", "AWS_REGION": REGION,
    }  # fmt: skip
    assert reaper_lambda.settings_from_env(function_env(stack)) == Settings(
        **{**settings.__dict__, "instance_profile": stack["profile_arn"], "ami_parameter": Settings.ami_parameter,
           "instance_types": reaper_lambda.NEVER_LAUNCHED}
    )  # fmt: skip
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "gpu_runner/ec2_runner/reaper_lambda.py" in names and not [n for n in names if "__pycache__" in n]
    # The package sits in the stack's bucket under its content key.
    bucket = stack["deployed"].outputs["BucketName"]
    body = (
        stack["session"].client("s3").get_object(Bucket=bucket, Key=lambda_zip.code_key(data))["Body"].read()
    )
    assert body == data
    # The role trusts Lambda only.
    (statement,) = trust_of(stack["session"], config["Role"])["Statement"]
    assert (statement["Principal"], statement["Action"]) == (
        {"Service": "lambda.amazonaws.com"},
        "sts:AssumeRole",
    )


def test_a_rerun_reuses_the_uploaded_package(stack: dict[str, Any]) -> None:
    before, after = stack["object"]
    assert (after.get("VersionId"), after["LastModified"]) == (
        before.get("VersionId"),
        before["LastModified"],
    )


def test_bootstrap_refuses_a_package_swapped_in_the_bucket_before_deploy(
    tmp_path: Path, oidc_provider: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attack: someone who may write to the bucket (the runner role may) replaces the package between upload and
    deploy. On AWS the pinned S3ObjectVersion keeps the real one; moto ignores the version and deploys the swapped
    one, and bootstrap's CodeSha256 check refuses it with the reason."""
    session = boto3.Session(region_name=REGION)
    attacker = boto3.Session(region_name=REGION).client("s3")
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr(
            "gpu_runner/ec2_runner/reaper_lambda.py", "def handler(event, context):\n    pass  # anything\n"
        )

    def swap(params: Any, model: Any, **_: Any) -> None:
        if model.name == "PutObject" and params.get("Key", "").startswith(lambda_zip.KEY_PREFIX):
            attacker.put_object(Bucket=params["Bucket"], Key=params["Key"], Body=evil.getvalue())

    session.events.register(
        "after-call.s3.PutObject", lambda model, **kw: swap(kw["context"]["api_params"], model)
    )
    session.events.register("provide-client-params.s3.PutObject", _keep_params)
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    settings_file = write_settings(tmp_path / "gpu-runner.yaml")
    bucket = f"lambda-swap-{uuid.uuid4().hex[:12]}"
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    argv = ["--settings", str(settings_file), "bootstrap", "--repository", DEFAULT_REPOSITORY, "--bucket", bucket,
            "--oidc-provider-arn", oidc_provider, "--template", str(TEMPLATE), "--platform", TEST_PLATFORM]  # fmt: skip
    try:
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert "not the" in err and "someone else wrote to that key" in err, err
    finally:
        with contextlib.suppress(ClientError):
            name = stack_name(load_settings(settings_file).project, DEFAULT_REPOSITORY)
            session.client("cloudformation").delete_stack(StackName=name)


def test_the_schedule_invokes_the_function_every_15_minutes() -> None:
    """What moto does not create, asserted on the template (property names: CloudFormation Template Reference)."""
    from gpu_runner_testing.gpu_runner_stack import template  # the CloudFormation-tag-aware loader

    parsed = template()
    resources = parsed["Resources"]
    schedule = resources["ReaperScheduleRule"]
    assert schedule["Type"] == "AWS::Scheduler::Schedule" and schedule["Condition"] == "HasReaperCode"
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == {"Ref": "ReaperSchedule"}
    assert parsed["Parameters"]["ReaperSchedule"]["Default"] == "rate(15 minutes)"
    assert props["FlexibleTimeWindow"] == {"Mode": "OFF"} and props["State"] == "ENABLED"
    assert props["Target"]["Arn"] == {"Fn::GetAtt": ["ReaperFunction", "Arn"]}
    assert props["Target"]["RoleArn"] == {"Fn::GetAtt": ["ReaperScheduleRole", "Arn"]}
    # Retries end before the next run starts.
    assert props["Target"]["RetryPolicy"]["MaximumEventAgeInSeconds"] < 15 * 60
    code = resources["ReaperFunction"]["Properties"]["Code"]
    assert code["S3ObjectVersion"] == {"Fn::If": ["HasReaperCodeVersion", {"Ref": "ReaperCodeVersion"}, {"Ref": "AWS::NoValue"}]}  # fmt: skip
    assert {r["Condition"] for r in resources.values() if r["Type"].startswith(("AWS::Lambda", "AWS::Scheduler"))} == {"HasReaperCode"}  # fmt: skip


def test_moto_still_skips_the_schedule_and_its_role_is_scoped(stack: dict[str, Any]) -> None:
    session = stack["session"]
    # If this fails, moto's CloudFormation creates schedules now: assert the deployed one instead of the template.
    assert session.client("scheduler").list_schedules()["Schedules"] == []
    resources = session.client("cloudformation").describe_stack_resources(
        StackName=stack["deployed"].stack_name
    )
    role = next(r for r in resources["StackResources"] if r.get("LogicalResourceId") == "ReaperScheduleRole")
    role_arn = session.client("iam").get_role(RoleName=role["PhysicalResourceId"])["Role"]["Arn"]
    (statement,) = trust_of(session, role_arn)["Statement"]
    policy = stack_policy(stack, "ReaperSchedulePolicy")
    assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
    function_arn = stack["function"]["FunctionArn"]
    assert allowed([policy], Request("lambda:InvokeFunction", function_arn))
    other = function_arn.rsplit(":", 1)[0] + ":someone-elses-function"
    assert not allowed([policy], Request("lambda:InvokeFunction", other))
    assert granted_actions([policy]) == {"lambda:InvokeFunction"}
    assert _parliament(policy) == []


HANDLER_RUN = """
import importlib.abc, json, os, sys
from datetime import UTC, datetime, timedelta

class NotInLambda(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not in the Lambda Python runtime")
        return None

BLOCKED = set(json.loads(os.environ["NOT_IN_LAMBDA"]))
sys.meta_path.insert(0, NotInLambda())
sys.path.insert(0, os.environ["PACKAGE_DIR"])
from gpu_runner.ec2_runner import reaper_lambda

# As Lambda's Python runtime sets up logging without AWS_LAMBDA_LOG_LEVEL: its handler on the root logger, whose
# level stays Python's WARNING (awslambdaric bootstrap.py _setup_logging).
import logging
runtime = logging.StreamHandler(sys.stderr)
runtime.setFormatter(logging.Formatter("[%(levelname)s]\t%(message)s"))
logging.getLogger().addHandler(runtime)
now = reaper_lambda.handler({"source": "scheduler"}, None)
later = datetime.now(UTC) + timedelta(minutes=int(os.environ["GPU_RUNNER_REAP_GRACE_MINUTES"]) + 1)
print(json.dumps({
    "now": now,
    "later": reaper_lambda.reap_aws(os.environ, now=later),
    "file": reaper_lambda.__file__,
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
}))
"""


@pytest.mark.slow  # runs the built package's handler in a fresh interpreter
def test_the_deployed_package_reaps_expired_instances_and_stale_parameters_without_github(
    stack: dict[str, Any], ec2: Any, tmp_path: Path
) -> None:
    settings, session, profile = stack["settings"], stack["session"], stack["profile_arn"]
    now = datetime.now(UTC)
    expired = launch(ec2, tags_of(settings, "1", now - timedelta(minutes=1)), profile)
    healthy = launch(ec2, tags_of(settings, "2", now + timedelta(hours=2)), profile)
    # Tagged like ours by another principal, but not launched with our instance profile: never ours to end.
    copied_tags = launch(ec2, tags_of(settings, "3", now - timedelta(days=1)), None)
    other_project = launch(ec2, tags_of(settings, "4", now - timedelta(days=1), **{naming.TAG_PROJECT: "other"}), profile)  # fmt: skip
    ssm = session.client("ssm")
    stale = f"{settings.ssm_prefix}/1-1/jitconfig"
    ssm.put_parameter(Name=stale, Value="x", Type="SecureString")
    ssm.put_parameter(Name=f"/elsewhere/{uuid.uuid4().hex[:6]}/jitconfig", Value="keep", Type="SecureString")

    # The package exactly as deployed: the object the function was created from.
    bucket = stack["deployed"].outputs["BucketName"]
    data = session.client("s3").get_object(Bucket=bucket, Key=lambda_zip.code_key(lambda_zip.build_zip()))["Body"].read()  # fmt: skip
    assert lambda_zip.code_sha256(data) == stack["function"]["CodeSha256"]
    package = tmp_path / "package"
    zipfile.ZipFile(io.BytesIO(data)).extractall(package)
    env = {**os.environ, **function_env(stack), "PACKAGE_DIR": str(package), "NOT_IN_LAMBDA": json.dumps(NOT_IN_LAMBDA)}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", HANDLER_RUN], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(package), out["file"]
    assert out["loaded"] == []
    assert out["now"]["terminated"] == [expired]
    # What it did reaches the function's CloudWatch log through the runtime's handler.
    assert f"[INFO]\tterminated {expired} in {REGION}: " in result.stderr, result.stderr[-3000:]
    assert out["now"]["parameters_deleted"] == []  # fresh: a launch may still be using it
    assert out["later"]["parameters_deleted"] == [stale]
    assert out["now"]["runners_deleted"] == out["later"]["runners_deleted"] == []
    assert state(ec2, expired) in {"shutting-down", "terminated"}
    for survivor in (healthy, copied_tags, other_project):
        assert state(ec2, survivor) == "running", survivor


def test_the_package_fails_loudly_when_github_would_be_imported(tmp_path: Path) -> None:
    """The import blocker above can fail: the CLI's module imports PyGithub at its top."""
    package = tmp_path / "package"
    zipfile.ZipFile(io.BytesIO(lambda_zip.build_zip())).extractall(package)
    script = (
        HANDLER_RUN.split("from gpu_runner.ec2_runner import reaper_lambda")[0]
        + "from gpu_runner import cli\n"
    )
    env = {**os.environ, "PACKAGE_DIR": str(package), "NOT_IN_LAMBDA": json.dumps(NOT_IN_LAMBDA)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode != 0 and "is not in the Lambda Python runtime" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"GPU_RUNNER_PROJECT": None}, "GPU_RUNNER_PROJECT: not set"),
        ({"GPU_RUNNER_MAX_RUNTIME_MINUTES": "3h"}, "GPU_RUNNER_MAX_RUNTIME_MINUTES: '3h' is not an integer"),
        ({"GPU_RUNNER_REAP_GRACE_MINUTES": "0"}, "reap_grace_minutes: must be a positive integer"),
    ],
)
def test_a_bad_function_environment_is_named(
    stack: dict[str, Any], change: dict[str, str | None], message: str
) -> None:
    env = {k: v for k, v in {**function_env(stack), **change}.items() if v is not None}
    with pytest.raises(SettingsError, match=message):
        reaper_lambda.settings_from_env(env)


def test_the_function_role_grants_exactly_one_pass_and_nothing_else(stack: dict[str, Any], ec2: Any) -> None:
    settings, profile = stack["settings"], stack["profile_arn"]
    now = datetime.now(UTC)
    expired = launch(ec2, tags_of(settings, "11", now - timedelta(minutes=1)), profile)
    stack["session"].client("ssm").put_parameter(Name=f"{settings.ssm_prefix}/11-1/jitconfig", Value="x", Type="SecureString")  # fmt: skip
    (described,) = ec2.describe_instances(InstanceIds=[expired])["Reservations"][0]["Instances"]
    profiles = {expired: described["IamInstanceProfile"]["Arn"]}
    recorded = boto3.Session(region_name=REGION)
    calls = record_calls(recorded)
    report = reaper_lambda.reap_aws(function_env(stack), aws=Aws(recorded), now=now + timedelta(hours=1))
    assert report["terminated"] == [expired] and len(report["parameters_deleted"]) == 1, report

    policy = stack_policy(stack, "ReaperFunctionPolicy")
    requests = _authorizations(stack["session"], calls, profiles)
    assert [r for r in requests if not allowed([policy], r)] == []
    assert granted_actions([policy]) == {r.action for r in requests} | RUNTIME_LOG_ACTIONS
    assert _parliament(policy) == []

    instance_arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
    ours = {"ec2:ResourceTag/gpu-runner:managed-by": "gpu-runner", "ec2:ResourceTag/gpu-runner:project": settings.project}  # fmt: skip
    parameter = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{settings.ssm_prefix}/12-1/jitconfig"
    other_profile = profile.replace("instance-profile/", "instance-profile/x")
    other_project = {**ours, "ec2:ResourceTag/gpu-runner:project": "other", "ec2:InstanceProfile": profile}
    refused = [
        # Our tags, copied onto an instance launched with another profile, or none.
        Request("ec2:TerminateInstances", instance_arn, {**ours, "ec2:InstanceProfile": other_profile}),
        Request("ec2:TerminateInstances", instance_arn, ours),
        Request("ec2:TerminateInstances", instance_arn, other_project),
        Request("ec2:RunInstances", instance_arn, ours),
        Request("ssm:GetParameter", parameter),  # it never reads a runner's config
        Request("ssm:DeleteParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/other/1-1/jitconfig"),
        Request("logs:PutLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/other:*"),
        Request("iam:PassRole", stack["function"]["Role"]),
    ]
    assert [r for r in refused if allowed([policy], r)] == []
    allowed_terminate = Request(
        "ec2:TerminateInstances", instance_arn, {**ours, "ec2:InstanceProfile": profile}
    )
    assert allowed([policy], allowed_terminate), (
        "the refusals above must come from the conditions, not a typo"
    )


def test_info_lines_are_shown_unless_the_function_chose_a_log_level() -> None:
    package = logging.getLogger("gpu_runner")
    before = package.level
    try:
        package.setLevel(logging.NOTSET)
        reaper_lambda.show_info_lines({reaper_lambda.LOG_LEVEL_VARIABLE: "WARN"})
        assert package.level == logging.NOTSET  # the runtime set the root's level from it: left alone
        reaper_lambda.show_info_lines({})
        assert package.level == logging.INFO
    finally:
        package.setLevel(before)


def write_settings(path: Path) -> Path:
    project = f"lambda-{uuid.uuid4().hex[:8]}"
    path.write_text(
        yaml.safe_dump(
            {
                "project": project, "region": REGION, "instance_types": ["g4dn.xlarge", "g5.xlarge"],
                "ami_parameter": "/test/dlami/ami-id", "ssm_prefix": f"/gpu-runner/{project}/{DEFAULT_REPOSITORY}",
                "max_runtime_minutes": 60, "idle_timeout_minutes": 10, "wait_timeout_seconds": 5,
                "reap_grace_minutes": 20,
            }
        )
    )  # fmt: skip
    return path


def deploy(settings_file: Path, oidc_provider: str) -> stack_deploy.Deployed:
    settings = load_settings(settings_file)
    return stack_deploy.bootstrap(
        settings_file, project=settings.project, region=REGION, repository=DEFAULT_REPOSITORY,
        bucket=f"lambda-test-{uuid.uuid4().hex[:12]}", oidc_provider=oidc_provider,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, oidc_provider: str) -> Iterator[dict[str, Any]]:
    settings_file = write_settings(tmp_path_factory.mktemp("lambda") / "gpu-runner.yaml")
    deployed = deploy(settings_file, oidc_provider)
    session = boto3.Session(region_name=REGION)
    # A second bootstrap, as a user re-runs it: it must leave the package's object as it is (same key, same
    # version), or every run would update the stack.
    s3, key = session.client("s3"), lambda_zip.code_key(lambda_zip.build_zip())
    before = s3.head_object(Bucket=deployed.outputs["BucketName"], Key=key)
    assert cli.main(deployed.argv) == 0
    after = s3.head_object(Bucket=deployed.outputs["BucketName"], Key=key)
    function = session.client("lambda").get_function(FunctionName=deployed.outputs["ReaperFunctionName"])
    profile = session.client("iam").get_instance_profile(
        InstanceProfileName=deployed.outputs["RunnerInstanceProfile"]
    )["InstanceProfile"]
    yield {"deployed": deployed, "session": session, "settings": load_settings(settings_file),
           "function": function["Configuration"], "profile_arn": profile["Arn"], "object": (before, after)}  # fmt: skip
    with contextlib.suppress(ClientError):
        session.client("cloudformation").delete_stack(StackName=deployed.stack_name)


@pytest.fixture
def ec2(stack: dict[str, Any]) -> Iterator[Any]:
    """This region's EC2 client; every instance the test started and left running is terminated afterwards (only
    those: live_instances says why)."""
    client = stack["session"].client("ec2")
    before = live_instances.live_ids(client)
    yield client
    live_instances.terminate_started_since(client, before)


def launch(ec2: Any, tags: dict[str, str], profile_arn: str | None) -> str:
    ami = first_amazon_image(ec2)
    extra = {"IamInstanceProfile": {"Arn": profile_arn}} if profile_arn else {}
    reply = ec2.run_instances(
        ImageId=ami, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1, **extra,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )  # fmt: skip
    return reply["Instances"][0]["InstanceId"]


def state(ec2: Any, instance_id: str) -> str:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ]


def tags_of(settings: Settings, run_id: str, expires_at: datetime, **changes: str) -> dict[str, str]:
    ctx = RunContext(DEFAULT_REPOSITORY, run_id, "1", "train/x", "a" * 40)
    return {**lifecycle.instance_tags(settings, ctx, runner_id=42, expires_at=expires_at), **changes}


def function_env(stack: dict[str, Any]) -> dict[str, str]:
    """The deployed function's environment, plus what Lambda adds itself (AWS_REGION). As strings: Lambda's
    EnvironmentVariables are String to String (botocore lambda model); moto's CloudFormation keeps a Number
    parameter's int there."""
    variables = stack["function"]["Environment"]["Variables"]
    return {**{k: str(v) for k, v in variables.items()}, "AWS_REGION": REGION}


def trust_of(session: boto3.Session, role_arn: str) -> dict[str, Any]:
    return session.client("iam").get_role(RoleName=role_arn.rsplit("/", 1)[-1])["Role"][
        "AssumeRolePolicyDocument"
    ]


def stack_policy(stack: dict[str, Any], logical_id: str) -> dict[str, Any]:
    """A managed policy of the stack as moto created it (its references resolved). Read by its logical id, not
    through the role: when an update turns a condition true, moto 5.2.5 attaches the new policies to their new
    roles in an order that varies from run to run (seen: sometimes not yet). Which role each policy names is
    asserted on the template (test_each_reaper_policy_names_its_own_role)."""
    session = stack["session"]
    resources = session.client("cloudformation").describe_stack_resources(
        StackName=stack["deployed"].stack_name
    )
    (arn,) = [
        r["PhysicalResourceId"]
        for r in resources["StackResources"]
        if r.get("LogicalResourceId") == logical_id
    ]
    iam = session.client("iam")
    policy = iam.get_policy(PolicyArn=arn)["Policy"]
    return iam.get_policy_version(PolicyArn=arn, VersionId=policy["DefaultVersionId"])["PolicyVersion"][
        "Document"
    ]


def _keep_params(params: Any, context: Any, **_: Any) -> None:
    context["api_params"] = dict(params)


def _parliament(document: dict[str, Any]) -> list[str]:
    return [f"{f.issue}: {f.detail}" for f in analyze_policy_string(json.dumps(document)).findings]


def _authorizations(session: boto3.Session, calls: list[Any], profiles: dict[str, str]) -> list[Request]:
    """IAM's view of the calls; TerminateInstances also carries the instance's launch profile (ec2:InstanceProfile,
    a condition key of the EC2 instance resource type in the Service Authorization Reference). `profiles`: read
    before the pass, since moto describes a terminated instance without its profile."""
    lookup = session.client("ec2")

    def tags(region: str, instance_id: str) -> dict[str, str]:
        (instance,) = lookup.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"]
        return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}

    requests = []
    for call in calls:
        for r in requests_for(call, instance_tags=tags, profile_role=str, spot_role_exists=lambda: False):
            instance_id = r.resource.rsplit("/", 1)[-1]
            if r.action == "ec2:TerminateInstances" and instance_id in profiles:
                r = Request(
                    r.action, r.resource, {**r.context, "ec2:InstanceProfile": profiles[instance_id]}, r.call
                )
            requests.append(r)
    return requests
