"""`gpu-runner bootstrap` as a user runs it, against the moto server: the one way the runner tests deploy the stack
(test_stack_bootstrap and the policy tests check what it builds, test_doctor checks an account built by it)."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from gpu_runner import cli
from gpu_runner.setup import TEMPLATE
from gpu_runner.setup.stack import stack_name as name_of_stack

OIDC_URL = "token.actions.githubusercontent.com"
# The platform the test stacks' launch roles trust (bootstrap's --platform): a stand-in name and a fixed full SHA,
# so the trust tables read the same wherever they run (the bake's own bootstrap test reads its real pin instead).
TEST_PLATFORM = "your-org/mlops-template@9b325f58b6206c7f01c62d05e6b68943de218aeb"


def run_cli(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `gpu-runner <argv>`, with `env` added to the environment meanwhile."""
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(argv)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def oidc_provider_arn() -> str:
    """The account's GitHub OIDC provider, made once (moto's CloudFormation skips AWS::IAM::OIDCProvider, and an
    account holds one provider per URL: a second create answers EntityAlreadyExists)."""
    iam = boto3.Session(region_name="us-east-1").client("iam")  # IAM is global; its endpoint is us-east-1
    for provider in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]:
        if provider["Arn"].endswith(f"oidc-provider/{OIDC_URL}"):
            return provider["Arn"]
    return iam.create_open_id_connect_provider(
        Url=f"https://{OIDC_URL}", ClientIDList=["sts.amazonaws.com"], ThumbprintList=["0" * 40]
    )["OpenIDConnectProviderArn"]


@dataclass(frozen=True)
class Deployed:
    argv: list[str]
    printed: str  # what bootstrap printed (the settings and secrets to wire)
    stack_name: str
    outputs: dict[str, str]


def bootstrap(
    settings_path: Path, *, project: str, region: str, repository: str, bucket: str, oidc_provider: str,
    extra: tuple[str, ...] = (), github_env: dict[str, str] | None = None,
) -> Deployed:  # fmt: skip
    """Run the CLI's bootstrap (outside a workflow: no GITHUB_REPOSITORY) and read the stack's outputs back."""
    platform = () if "--platform" in extra else ("--platform", TEST_PLATFORM)
    argv = ["--settings", str(settings_path), "bootstrap", "--repository", repository, "--bucket", bucket,
            "--oidc-provider-arn", oidc_provider, *platform, *extra, "--template", str(TEMPLATE)]  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        patch.delenv("GITHUB_REPOSITORY", raising=False)
        # The OIDC subject template is set only with an admin token: the GitHub double's, never a real one.
        patch.delenv("GITHUB_TOKEN", raising=False)
        for key, value in (github_env or {}).items():
            patch.setenv(key, value)
        assert cli.main(argv) == 0, err.getvalue()
    stack_name = name_of_stack(project, repository)
    cfn = boto3.Session(region_name=region).client("cloudformation")
    described = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}
    _key_policies_as_text(boto3.Session(region_name=region).client("kms"), outputs)
    return Deployed(argv, out.getvalue(), stack_name, outputs)


def _key_policies_as_text(kms: Any, outputs: dict[str, str]) -> None:
    """moto's CloudFormation keeps an AWS::KMS::Key's KeyPolicy as the template's object, and its DescribeKey then
    fails parsing it (TypeError in moto/kms/policy_validator.py: a 500); AWS keeps the policy as JSON text
    (GetKeyPolicy answers a string). The same policy, stored as text, as AWS has it."""
    for output in ("JitConfigKeyArn", "GitHubCredentialKeyArn"):
        policy = kms.get_key_policy(KeyId=outputs[output], PolicyName="default")["Policy"]
        if not isinstance(policy, str):
            kms.put_key_policy(KeyId=outputs[output], PolicyName="default", Policy=json.dumps(policy))


def described(session: boto3.Session, name: str, printed: str) -> dict:
    """A stack deployed beside the gpu-runner one (mlflow-server, batch), as the runner tests read it: its name,
    outputs and parameters, what `up` printed, and the session that reads the moto server."""
    stack = session.client("cloudformation").describe_stacks(StackName=name)["Stacks"][0]
    return {
        "name": name,
        "outputs": {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]},
        "parameters": {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]},
        "printed": printed,
        "session": session,
    }


def delete_if_present(session: boto3.Session, name: str) -> None:
    """Delete the stack `name` if it exists, so the next `up` creates it.

    moto 5's CloudFormation sets a modified resource whose model has no update_from_cloudformation_json to nothing
    (moto/cloudformation/parsing.py, parse_and_update_resource returns None), and every DescribeStacks of the stack
    then answers 500 or lacks its outputs: the modules that deploy a stack with inputs of their own start fresh."""
    cfn, iam = session.client("cloudformation"), session.client("iam")
    try:
        resources = cfn.describe_stack_resources(StackName=name)["StackResources"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ValidationError":  # no such stack yet
            return
        raise
    # moto deletes the roles before the policies attached to them and refuses (DeleteConflict): detach first.
    for resource in resources:
        if resource.get("ResourceType") == "AWS::IAM::Role":
            role = resource["PhysicalResourceId"]
            for policy in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=role, PolicyArn=policy["PolicyArn"])
    cfn.delete_stack(StackName=name)
    cfn.get_waiter("stack_delete_complete").wait(StackName=name, WaiterConfig={"Delay": 1})
