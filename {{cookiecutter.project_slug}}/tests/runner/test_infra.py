"""infra/gpu-runner.yaml: linted (cfn-lint, parliament), deployed to the moto server by `gpu-runner bootstrap`,
and the lifecycle run with exactly the permissions it grants.

moto's CloudFormation creates the roles, policies, instance profile, security group and the bucket with its
encryption; it skips the OIDC provider resource and the bucket's versioning, public access block, lifecycle
rules and TLS-only policy. Those are asserted on the template instead (and cfn-lint checks their schema).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import stack_deploy
import yaml
from aws_faults import AwsFaults
from botocore.exceptions import ClientError
from github_double import DEFAULT_REPOSITORY, DEFAULT_TOKEN, GitHubDouble
from iam_requests import (
    SPOT_ROLE_ARN,
    SPOT_SERVICE,
    Call,
    Request,
    allowed,
    granted_actions,
    record_calls,
    requests_for,
    web_identity_allowed,
)
from parliament import analyze_policy_string
from stack_deploy import OIDC_URL, PROJECT_DIR, TEMPLATE

from gpu_runner import cli, credential, reaper
from gpu_runner.aws import Aws
from gpu_runner.github import GitHubRunners
from gpu_runner.naming import RunContext, parameter_name
from gpu_runner.settings import load_settings

# A region of its own: reading AWS's public parameters makes moto list them beside ours in that region, which
# the other runner tests (counting what is left under their prefix) must not see.
REGION = "ca-central-1"
# The project's own package (tests/runner is copied verbatim, so its name is looked up, not written).
PACKAGE = next(p.name for p in (PROJECT_DIR / "src").iterdir() if (p / "__init__.py").exists())
BOOT_SCRIPT = PROJECT_DIR / "runner" / "src" / "gpu_runner" / "bootstrap.sh"
# What each AWS CLI command in the boot script is authorized as.
BOOT_SCRIPT_ACTIONS = {
    ("ssm", "get-parameter"): "ssm:GetParameter",
    ("ssm", "delete-parameter"): "ssm:DeleteParameter",
    ("s3", "ls"): "s3:ListBucket",
    ("s3", "cp"): "s3:GetObject",
}
PUBLIC_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-x86_64-gp2"


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


def cfn_lint(path: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or "cfn-lint"
    return subprocess.run([tool, str(path)], capture_output=True, text=True, check=False)


# --- linters -------------------------------------------------------------------------------------------------


def test_template_is_cfn_lint_clean() -> None:
    result = cfn_lint(TEMPLATE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cfn_lint_catches_a_broken_template(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        TEMPLATE.read_text().replace(
            "Status: Enabled\n      PublicAccessBlock", "Status: Enable\n      PublicAccessBlock"
        )
    )
    assert broken.read_text() != TEMPLATE.read_text()
    result = cfn_lint(broken)
    assert result.returncode != 0 and "E3030" in result.stdout, result.stdout


def parliament_findings(document: dict[str, Any]) -> list[str]:
    return [
        f"{f.issue}: {f.detail}"
        for f in analyze_policy_string(json.dumps(document)).findings
        if not _split_run_instances(f.issue, f.detail)
    ]


def _split_run_instances(issue: str, detail: Any) -> bool:
    """parliament's one false positive here: it wants each RunInstances statement to name every resource type
    the action touches, but conditions differ per type (tags on instance and volume, none on image or subnet),
    so the policy splits them, as AWS's own RunInstances examples do. Only that exact finding is accepted."""
    return (
        issue == "RESOURCE_MISMATCH"
        and isinstance(detail, list)
        and bool(detail)
        and all(d.get("action") == "ec2:RunInstances" for d in detail)
    )


def test_parliament_catches_a_bad_policy() -> None:
    bad = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "ec2:RunInstance", "Resource": "*"},
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket"},
        ],
    }
    issues = " ".join(parliament_findings(bad))
    assert "UNKNOWN_ACTION" in issues and "RESOURCE_MISMATCH" in issues, issues
    # The accepted RunInstances finding stays narrow: any other action's mismatch is still reported.
    bad["Statement"][1] = {
        "Effect": "Allow",
        "Action": "ec2:TerminateInstances",
        "Resource": "arn:aws:s3:::b",
    }
    assert "RESOURCE_MISMATCH" in " ".join(parliament_findings(bad))


# --- the stack on the moto server ------------------------------------------------------------------------------


def write_settings(path: Path) -> Path:
    """A settings file with a project of its own: the stack name (gpu-runner-<project>) is unique to it."""
    path.write_text(
        yaml.safe_dump(
            {
                "project": f"infra-{uuid.uuid4().hex[:8]}",
                "region": REGION,
                "instance_types": ["g4dn.xlarge", "g5.xlarge"],
                "ami_parameter": PUBLIC_AMI_PARAMETER,
                "ssm_prefix": "/gpu-runner/infra-test",
                "wait_timeout_seconds": 5,
            }
        )
    )
    return path


# One stack for the module: deploying it is the slow part, and the tests only read it (the re-run updates it
# with the same input).
@pytest.fixture(scope="module")
def settings_file(tmp_path_factory: pytest.TempPathFactory, ami_for_infra: str) -> Path:
    return write_settings(tmp_path_factory.mktemp("infra") / "gpu-runner.yaml")


@pytest.fixture(scope="module")
def ami_for_infra(moto_endpoint: str) -> str:
    """The AMI behind moto's copy of AWS's public Amazon Linux parameter (the policy allows /aws/service/*)."""
    session = boto3.Session(region_name=REGION)
    ami_id = session.client("ssm").get_parameter(Name=PUBLIC_AMI_PARAMETER)["Parameter"]["Value"]
    # Raises (InvalidAMIID.NotFound) if moto ever stops shipping that image: the launch below needs it.
    assert session.client("ec2").describe_images(ImageIds=[ami_id])["Images"], ami_id
    return ami_id


@pytest.fixture(scope="module")
def stack(
    settings_file: Path, oidc_provider: str, tmp_path_factory: pytest.TempPathFactory
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
            extra=("--owner-id", "1001", "--repository-id", "2002", "--token-file", str(token_file)),
            github_env={"GITHUB_TOKEN": DEFAULT_TOKEN, "GITHUB_API_URL": double.url},
        )  # fmt: skip
        oidc_sub = dict(double.oidc_sub[DEFAULT_REPOSITORY.lower()])
        assert double.take_violations() == []
    session = boto3.Session(region_name=REGION)
    yield {"argv": deployed.argv, "printed": deployed.printed, "outputs": deployed.outputs, "settings": settings,
           "bucket": bucket, "session": session, "oidc": oidc_provider, "name": deployed.stack_name,
           "oidc_sub": oidc_sub}  # fmt: skip
    # Best effort: moto deletes a stack's resources in template order, so a role with an attached policy
    # refuses (DeleteConflict). Names are unique per module, so a leftover stack cannot affect another test.
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


def test_bootstrap_deploys_and_prints_the_github_settings(stack: dict[str, Any]) -> None:
    outputs, printed, session = stack["outputs"], stack["printed"], stack["session"]
    repo = DEFAULT_REPOSITORY
    assert f"gh variable set AWS_ROLE_ARN --repo {repo} --body {outputs['TrainRoleArn']}" in printed
    assert f"gh variable set AWS_REAPER_ROLE_ARN --repo {repo} --body {outputs['ReaperRoleArn']}" in printed
    # The credential went into AWS, not a repository secret; the OIDC subject template names the workflow.
    assert "gh secret set" not in printed
    assert (
        f"stored the GitHub credential in SSM SecureString {outputs['GitHubCredentialParameter']}" in printed
    )
    assert stack["oidc_sub"] == {
        "use_default": False,
        "include_claim_keys": ["repo", "context", "job_workflow_ref"],
    }
    assert f"instance_profile: {outputs['RunnerInstanceProfile']}" in printed
    assert f"security_group_ids: [{outputs['RunnerSecurityGroupId']}]" in printed
    assert outputs["OidcProviderArn"] == stack["oidc"]

    # The security group: no inbound rule at all.
    ec2 = session.client("ec2")
    (group,) = ec2.describe_security_groups(GroupIds=[outputs["RunnerSecurityGroupId"]])["SecurityGroups"]
    assert group["IpPermissions"] == []
    # The bucket exists, encrypted.
    s3 = session.client("s3")
    rules = s3.get_bucket_encryption(Bucket=stack["bucket"])["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"

    # A second run updates nothing and succeeds.
    assert cli.main(stack["argv"]) == 0


def _trust_subjects(role: dict[str, Any]) -> tuple[str, list[str]]:
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"]["StringEquals"] == {f"{OIDC_URL}:aud": "sts.amazonaws.com"}
    assert set(statement["Condition"]) == {"StringEquals", "StringLike"}
    return statement["Principal"]["Federated"], statement["Condition"]["StringLike"][f"{OIDC_URL}:sub"]


def test_roles_trust_only_this_repository_in_both_subject_forms(stack: dict[str, Any]) -> None:
    session, outputs = stack["session"], stack["outputs"]
    owner, name = DEFAULT_REPOSITORY.split("/")
    provider, subjects = _trust_subjects(role_of(session, outputs["TrainRoleArn"]))
    assert provider == stack["oidc"]
    workflows = f"{owner}/{name}/.github/workflows"
    assert subjects == [
        f"repo:{owner}/{name}:ref:refs/heads/train/*:job_workflow_ref:{workflows}/gpu-runner-{job}.yml@refs/heads/main"
        for job in ("start", "stop")
    ] + [
        f"repo:{owner}@1001/{name}@2002:ref:refs/heads/train/*:job_workflow_ref:{workflows}/gpu-runner-{job}.yml"
        "@refs/heads/main"
        for job in ("start", "stop")
    ]
    provider, subjects = _trust_subjects(role_of(session, outputs["ReaperRoleArn"]))
    assert provider == stack["oidc"]
    assert subjects == [
        f"repo:{owner}/{name}:ref:refs/heads/main:job_workflow_ref:{workflows}/reap.yml@refs/heads/main",
        f"repo:{owner}@1001/{name}@2002:ref:refs/heads/main:job_workflow_ref:{workflows}/reap.yml@refs/heads/main",
    ]


# Item 2 of issue 13: which OIDC tokens may assume the launch (train) and reaper roles. `sub` as GitHub writes it
# once bootstrap set the template repo, context, job_workflow_ref (GitHub docs "OpenID Connect reference" >
# "Customizing the subject claims", example "Requiring a reusable workflow and other claims", read 2026-12-01).
_O, _N = DEFAULT_REPOSITORY.split("/")
_WF = f"{_O}/{_N}/.github/workflows"
SUB_TABLE = [
    # (who, sub, may assume the launch role, may assume the reaper role)
    ("the default branch's start workflow, push to a train branch",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", True, False),
    ("the default branch's stop workflow, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/train/a/b:job_workflow_ref:{_WF}/gpu-runner-stop.yml@refs/heads/main", True, False),
    ("a branch's own train.yml job (it rewrote the workflow)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/train.yml@refs/heads/train/demo", False, False),
    ("the branch's own copy of the reusable workflow (uses: ./...)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/train/demo", False, False),
    ("a pull request calling the default branch's workflow",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a branch outside the train prefix",
     f"repo:{_O}/{_N}:ref:refs/heads/feature:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a job with an environment",
     f"repo:{_O}/{_N}:environment:prod:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("another repository's workflow of the same name",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:evil/{_N}/.github/workflows/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a tag",
     f"repo:{_O}/{_N}:ref:refs/tags/v1:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a recycled owner name (other ids)",
     f"repo:{_O}@9999/{_N}@2002:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("GitHub's default subject (template never set): any train branch's workflow",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo", False, False),
    ("the default branch's reap.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/reap.yml@refs/heads/main", False, True),
    ("a train branch's reap.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/reap.yml@refs/heads/train/demo", False, False),
    ("a dispatch of the default branch's train.yml on main (start workflow, main context)",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("GitHub's default subject on the default branch",
     f"repo:{_O}/{_N}:ref:refs/heads/main", False, False),
]  # fmt: skip


@pytest.mark.parametrize(("who", "sub", "launch", "reap"), SUB_TABLE, ids=[row[0] for row in SUB_TABLE])
def test_only_the_default_branch_workflows_assume_the_roles(
    stack: dict[str, Any], who: str, sub: str, launch: bool, reap: bool
) -> None:
    session, outputs = stack["session"], stack["outputs"]
    claims = {f"{OIDC_URL}:aud": "sts.amazonaws.com", f"{OIDC_URL}:sub": sub}
    for output, expected in (("TrainRoleArn", launch), ("ReaperRoleArn", reap)):
        trust = role_of(session, outputs[output])["AssumeRolePolicyDocument"]
        assert web_identity_allowed(trust, stack["oidc"], claims) is expected, (output, who)
    # The audience is checked too: the same subject for another audience is refused.
    other = {**claims, f"{OIDC_URL}:aud": "https://github.com/evil"}
    assert not web_identity_allowed(role_of(session, outputs["TrainRoleArn"])["AssumeRolePolicyDocument"],
                                    stack["oidc"], other)  # fmt: skip


def test_only_the_launch_and_reaper_roles_can_read_the_github_credential(stack: dict[str, Any]) -> None:
    """The credential's parameter: readable by the launch and reaper roles' policies, not the runner role's
    (which may read everything below ssm_prefix); its key decrypts for those two roles only, through SSM."""
    session, outputs = stack["session"], stack["outputs"]
    name = outputs["GitHubCredentialParameter"]
    assert name == credential.parameter_name(stack["settings"])
    read = Request("ssm:GetParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter{name}")
    assert allowed(role_policies(stack, "TrainRoleArn"), read)
    assert allowed(role_policies(stack, "ReaperRoleArn"), read)
    assert not allowed(managed_policies(session, runner_role_name(stack)), read)
    # The value is a SecureString under the stack's key, not the AWS-managed aws/ssm key.
    ssm = session.client("ssm")
    (meta,) = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}])["Parameters"]
    assert meta["Type"] == "SecureString" and meta["KeyId"] == outputs["GitHubCredentialKeyArn"]
    # Key policy: kms:Decrypt only for the two roles and only through SSM; the account itself gets no decrypt, so
    # no IAM policy in the account can grant one (AWS KMS Developer Guide, "Key policies": without a key policy
    # statement for the account, IAM policies do not apply).
    kms = session.client("kms")
    raw = kms.get_key_policy(KeyId=outputs["GitHubCredentialKeyArn"], PolicyName="default")["Policy"]
    # AWS answers a JSON string; moto's CloudFormation keeps the template's KeyPolicy object as it was given.
    policy = json.loads(raw) if isinstance(raw, str) else raw
    decrypters = [
        s for s in policy["Statement"]
        if s["Effect"] == "Allow" and any(a in ("kms:Decrypt", "kms:*") for a in json_list(s["Action"]))
    ]  # fmt: skip
    (statement,) = decrypters
    assert sorted(json_list(statement["Principal"]["AWS"])) == sorted(
        [outputs["TrainRoleArn"], outputs["ReaperRoleArn"]]
    )
    assert statement["Condition"] == {"StringEquals": {"kms:ViaService": f"ssm.{REGION}.amazonaws.com"}}
    for s in policy["Statement"]:
        assert (
            not any(a.startswith("kms:Decrypt") or a == "kms:*" for a in json_list(s["Action"]))
            or s is statement
        )


def json_list(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def test_runner_role_reaches_only_the_bucket_and_its_parameters(stack: dict[str, Any]) -> None:
    session, outputs, settings, bucket = (
        stack["session"],
        stack["outputs"],
        stack["settings"],
        stack["bucket"],
    )
    iam = session.client("iam")
    profile = iam.get_instance_profile(InstanceProfileName=outputs["RunnerInstanceProfile"])[
        "InstanceProfile"
    ]
    (role,) = profile["Roles"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert session.client("iam").list_role_policies(RoleName=role["RoleName"])["PolicyNames"] == []
    (document,) = managed_policies(session, role["RoleName"])
    resources = {
        r
        for s in document["Statement"]
        for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
    }
    assert resources == {
        f"arn:aws:s3:::{bucket}",
        f"arn:aws:s3:::{bucket}/*",
        f"arn:aws:ssm:{REGION}:123456789012:parameter{settings.ssm_prefix}/*",
    }
    assert granted_actions([document]) == {
        "s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "ssm:GetParameter", "ssm:DeleteParameter",
    }  # fmt: skip


def test_a_rerun_without_changes_says_up_to_date(
    stack: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # moto applies every update; real CloudFormation refuses an update that changes nothing with this error.
    session = boto3.Session(region_name=REGION)
    AwsFaults(session).fail(
        "cloudformation", "UpdateStack", "ValidationError", message="No updates are to be performed."
    )
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    assert cli.main(stack["argv"]) == 0
    out = capsys.readouterr().out
    assert f"stack {stack['name']} is up to date" in out
    assert f"--body {stack['outputs']['TrainRoleArn']}" in out


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--repository", "octo-org", "--repository: 'octo-org' is not owner/name"),
        ("--bucket", "Bad_Bucket", "--bucket: 'Bad_Bucket' is not a valid S3 bucket name"),
        ("--owner-id", "octo", "--owner-id: 'octo' must be GitHub's numeric id"),
        ("--oidc-provider-arn", "arn:aws:iam::123456789012:oidc-provider/example.com", "is not the ARN of a"),
        ("--template", "missing.yaml", "--template: missing.yaml not found"),
    ],
)  # fmt: skip
def test_bootstrap_refuses_bad_input_before_any_call(
    settings_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    message: str,
) -> None:
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    args = {
        "--repository": DEFAULT_REPOSITORY,
        "--bucket": "good-bucket",
        "--template": str(TEMPLATE),
        flag: value,
    }
    if flag == "--owner-id":
        args["--repository-id"] = "2002"
    argv = ["--settings", str(settings_file), "bootstrap", *[x for kv in args.items() for x in kv]]
    assert cli.main(argv) == 1
    assert message in capsys.readouterr().err
    assert calls == []


def test_bootstrap_names_a_bucket_that_exists_already(
    tmp_path: Path,
    oidc_provider: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings_file = write_settings(tmp_path / "gpu-runner.yaml")
    bucket = f"taken-{uuid.uuid4().hex[:12]}"
    boto3.Session(region_name=REGION).client("s3").create_bucket(
        Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    argv = ["--settings", str(settings_file), "bootstrap", "--repository", DEFAULT_REPOSITORY, "--bucket", bucket,
            "--oidc-provider-arn", oidc_provider, "--template", str(TEMPLATE)]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "BucketAlreadyExists" in err and "--bucket" in err, err


def test_every_policy_passes_parliament(stack: dict[str, Any]) -> None:
    documents = {
        "train": role_policies(stack, "TrainRoleArn"),
        "reaper": role_policies(stack, "ReaperRoleArn"),
        "runner": managed_policies(stack["session"], runner_role_name(stack)),
    }
    assert all(len(docs) == 1 for docs in documents.values()), documents
    for name, (document,) in documents.items():
        assert parliament_findings(document) == [], name


def test_bucket_settings_in_the_template() -> None:
    """What moto's CloudFormation does not apply to the bucket, asserted on the template itself."""
    resources = template()["Resources"]
    bucket = resources["Bucket"]
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(props["PublicAccessBlockConfiguration"]) == 4
    rules = {rule["Id"]: rule for rule in props["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-old-checkpoints"]["Prefix"] == "checkpoints/"
    assert rules["expire-old-checkpoints"]["ExpirationInDays"] == {"Ref": "CheckpointRetentionDays"}
    (tls,) = resources["BucketTlsOnlyPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert (tls["Effect"], tls["Principal"], tls["Action"]) == ("Deny", "*", "s3:*")
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    provider = resources["GitHubOidcProvider"]
    assert provider["Condition"] == "CreateOidcProvider"
    assert provider["Properties"]["Url"] == f"https://{OIDC_URL}"
    assert provider["Properties"]["ClientIdList"] == ["sts.amazonaws.com"]
    assert "SecurityGroupIngress" not in resources["RunnerSecurityGroup"]["Properties"]
    assert not [r for r in resources.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]


# --- the lifecycle with exactly these permissions ---------------------------------------------------------------


@pytest.fixture
def recorded(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[list[Call], boto3.Session]]:
    """Every AWS call the gpu-runner CLI makes, through a session the CLI gets instead of its default one."""
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    yield calls, session
    ec2 = session.client("ec2")
    reply = ec2.describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    ids = [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]]
    if ids:
        ec2.terminate_instances(InstanceIds=ids)


def authorizations(calls: list[Call]) -> list[Request]:
    # Look-ups through a session of their own: the recorded one must hold only gpu-runner's calls.
    lookup = boto3.Session(region_name=REGION)
    iam = lookup.client("iam")

    def instance_tags(region: str, instance_id: str) -> dict[str, str]:
        reservations = lookup.client("ec2", region_name=region).describe_instances(InstanceIds=[instance_id])
        return {
            t["Key"]: t["Value"]
            for r in reservations["Reservations"]
            for i in r["Instances"]
            for t in i.get("Tags", [])
        }

    def profile_role(profile_arn: str) -> str:
        try:
            profile = iam.get_instance_profile(InstanceProfileName=profile_arn.rsplit("/", 1)[-1])
        except iam.exceptions.NoSuchEntityException:
            return "arn:aws:iam::123456789012:role/not-ours"
        return profile["InstanceProfile"]["Roles"][0]["Arn"]

    return [
        r
        for call in calls
        for r in requests_for(
            call, instance_tags=instance_tags, profile_role=profile_role, spot_role_exists=spot_role_exists
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
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # As in the workflows: no GitHub credential in the environment, gpu-runner reads it from SSM with the role.
    for key in ("GPU_RUNNER_TOKEN", "GPU_RUNNER_APP_ID", "GPU_RUNNER_APP_PRIVATE_KEY"):
        monkeypatch.delenv(key, raising=False)
    return env


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
    }


def test_reaper_needs_exactly_the_reaper_policy(
    stack: dict[str, Any],
    settings_file: Path,
    recorded: tuple[list[Call], boto3.Session],
    workflow_env: dict[str, str],
    github_double: GitHubDouble,
) -> None:
    calls, session = recorded
    wire_settings(stack, settings_file)
    assert cli.main(["--settings", str(settings_file), "launch", "--spot", "false"]) == 0
    launch_calls = len(calls)
    settings = load_settings(settings_file)
    # As reap.yml does: the credential from SSM, with the recorded session (so the read is authorized too).
    env = credential.github_env(
        settings, session.client("ssm", region_name=REGION), {"GITHUB_API_URL": github_double.url}
    )
    with GitHubRunners.from_env(DEFAULT_REPOSITORY, env=env, backoff_seconds=0.01) as github:
        # Hours later: the instance is past its expiry and its parameter is stale.
        report = reaper.reap(settings, Aws(session), github, now=datetime.now(UTC) + timedelta(days=1))
    assert len(report.terminated) == 1 and len(report.parameters_deleted) == 1, report

    requests = authorizations(calls[launch_calls:])
    reaper_policy = role_policies(stack, "ReaperRoleArn")
    denied = [r for r in requests if not allowed(reaper_policy, r)]
    assert denied == [], denied
    assert granted_actions(reaper_policy) == {r.action for r in requests}
    # And the reaper role cannot launch.
    launch = authorizations(calls[:launch_calls])
    assert not [r for r in launch if r.action == "ec2:RunInstances" and allowed(reaper_policy, r)]


def _launch_requests(stack: dict[str, Any], **changes: Any) -> list[Request]:
    """The authorizations of one RunInstances as launch makes it, with one detail changed."""
    profile = stack["outputs"]["RunnerInstanceProfile"]
    tags = [
        {"Key": "gpu-runner:managed-by", "Value": "gpu-runner"},
        {"Key": "gpu-runner:project", "Value": stack["settings"].project},
    ]
    params: dict[str, Any] = {
        "ImageId": "ami-12345678", "InstanceType": "g5.xlarge", "MetadataOptions": {"HttpTokens": "required"},
        "IamInstanceProfile": {"Name": profile},
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"Encrypted": True}}],
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
    }  # fmt: skip
    params.update(changes)
    return authorizations([Call("ec2", "RunInstances", REGION, params)])


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"TagSpecifications": []}, id="untagged"),
        pytest.param({"InstanceType": "p5.48xlarge"}, id="instance-type-not-allowed"),
        pytest.param({"MetadataOptions": {"HttpTokens": "optional"}}, id="imdsv1"),
        pytest.param({"IamInstanceProfile": {"Name": "admin-profile"}}, id="other-instance-profile"),
        pytest.param({"BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"Encrypted": False}}]}, id="unencrypted"),
    ],
)  # fmt: skip
def test_train_policy_refuses_launches_outside_its_limits(
    stack: dict[str, Any], change: dict[str, Any]
) -> None:
    policy = role_policies(stack, "TrainRoleArn")
    assert all(allowed(policy, r) for r in _launch_requests(stack)), "the unchanged launch must be allowed"
    assert not all(allowed(policy, r) for r in _launch_requests(stack, **change))


@pytest.mark.parametrize(
    ("action", "resource", "context"),
    [
        ("ec2:TerminateInstances", f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0", {}),
        ("ec2:TerminateInstances", f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0",
         {"ec2:ResourceTag/gpu-runner:managed-by": "gpu-runner", "ec2:ResourceTag/gpu-runner:project": "other"}),
        ("ec2:CreateTags", f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0", {}),
        ("ssm:PutParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter/other/jitconfig", {}),
        ("ssm:GetParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter/gpu-runner/infra-test/1-1/jitconfig", {}),
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


def test_runner_role_covers_exactly_the_instance_and_training_calls(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    """The GPU instance's role: the boot script's AWS CLI commands and the training job's real S3 calls
    (checkpoint push, restore, stale deletes, completion; the data download) are all it is granted."""
    session, bucket, settings = stack["session"], stack["bucket"], stack["settings"]
    (policy,) = managed_policies(session, runner_role_name(stack))

    # The boot script: every `aws <service> <command>` in it, on this run's parameter and an S3 runner mirror.
    commands = set(re.findall(r"\baws ([a-z0-9-]+) ([a-z-]+)", BOOT_SCRIPT.read_text()))
    assert commands == set(BOOT_SCRIPT_ACTIONS), commands
    ctx = RunContext(DEFAULT_REPOSITORY, "9090", "1", "train/infra", "a" * 40)
    parameter = f"arn:aws:ssm:{REGION}:123456789012:parameter{parameter_name(settings.ssm_prefix, ctx)}"
    boot = [
        Request("ssm:GetParameter", parameter),
        Request("ssm:DeleteParameter", parameter),
        Request("s3:ListBucket", f"arn:aws:s3:::{bucket}"),
        Request("s3:GetObject", f"arn:aws:s3:::{bucket}/runner/actions-runner-linux-x64-2.330.0.tar.gz"),
    ]

    # The training job, through a recorded client: the checkpoint store and the data download.
    checkpoints = importlib.import_module(f"{PACKAGE}.checkpoints")
    s3sync = importlib.import_module(f"{PACKAGE}.s3sync")
    plain = session.client("s3")
    for name in ("a/1.png", "b/2.png"):
        plain.put_object(Bucket=bucket, Key=f"data/{name}", Body=b"image")
    recorded_session = boto3.Session(region_name=REGION)
    calls = record_calls(recorded_session)
    client = recorded_session.client("s3")
    local = tmp_path / "backup"
    (local / "chief").mkdir(parents=True)
    for name in ("checkpoint", "ckpt-1.index", "ckpt-1.data-00000-of-00001"):
        (local / "chief" / name).write_bytes(b"weights")
    store = checkpoints.S3Checkpoints(f"s3://{bucket}/checkpoints/train-infra/abc", local, client)
    store.push({"run_id": "r1", "epochs_done": 1})
    (local / "chief" / "ckpt-1.index").unlink()
    store.push({"run_id": "r1", "epochs_done": 2})  # a stale file is deleted
    assert store.restore() is not None
    store.mark_complete({"run_id": "r1", "epochs_done": 2})
    s3sync.sync_prefix(f"s3://{bucket}/data", tmp_path / "data", client=client)

    training = authorizations(calls)
    assert {c.operation for c in calls} >= {"PutObject", "ListObjectsV2", "DeleteObjects", "GetObject"}
    denied = [r for r in [*boot, *training] if not allowed([policy], r)]
    assert denied == [], denied
    assert granted_actions([policy]) == {r.action for r in [*boot, *training]}
    # Another bucket, another project's parameters: refused.
    assert not allowed([policy], Request("s3:GetObject", "arn:aws:s3:::someone-else/data/a.png"))
    other = f"arn:aws:ssm:{REGION}:123456789012:parameter/gpu-runner/other-project/1-1/jitconfig"
    assert not allowed([policy], Request("ssm:GetParameter", other))


def test_make_bootstrap_passes_the_bucket_and_branches_the_workflows_use() -> None:
    """`make bootstrap` is what the README says to run: its flags parse, and the bucket, repository and branch
    prefix it deploys are the ones train.yml uses."""
    makefile = (PROJECT_DIR / "Makefile").read_text()
    recipe = re.search(r"^bootstrap:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe, "no bootstrap target in the Makefile"
    command = recipe.group(1).replace("\\\n", " ").replace("$(BOOTSTRAP_ARGS)", "")
    words = shlex.split(command)
    args = cli._parser().parse_args(words[words.index("gpu-runner") + 1 :])
    assert args.command == "bootstrap" and str(args.settings) == "configs/gpu-runner.yaml"
    workflow = yaml.safe_load((PROJECT_DIR / ".github" / "workflows" / "train.yml").read_text())
    (train_step,) = [step for step in workflow["jobs"]["train"]["steps"] if step.get("id") == "train"]
    checkpoint_uri = train_step["env"]["CHECKPOINT_URI"]
    assert checkpoint_uri == f"s3://{args.bucket}/checkpoints"
    assert workflow[True]["push"]["branches"] == [f"{args.branch_prefix}**"]
    answers = json.loads((PROJECT_DIR / ".cookiecutter.json").read_text())["cookiecutter"]
    assert args.repository == f"{answers['github_owner']}/{answers['github_repo']}"
