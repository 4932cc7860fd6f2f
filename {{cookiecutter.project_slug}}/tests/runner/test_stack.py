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
    key_policy_allows,
    launched_profiles,
    record_calls,
    requests_for,
    s3_context,
    ssm_kms_request,
    web_identity_allowed,
)
from parliament import analyze_policy_string
from stack_deploy import OIDC_URL, PROJECT_DIR, TEMPLATE

from gpu_runner import cli, credential, lifecycle, naming, reaper
from gpu_runner.aws import Aws
from gpu_runner.github import GitHubRunners
from gpu_runner.naming import RunContext, parameter_name
from gpu_runner.settings import load_settings
from gpu_runner.stack import prefix_problem, repository_key, stack_name, trust_conflicts

# A region of its own: reading AWS's public parameters makes moto list them beside ours in that region, which
# the other runner tests (counting what is left under their prefix) must not see.
REGION = "ca-central-1"
# The project's own package (tests/runner is copied verbatim, so its name is looked up, not written).
PACKAGE = next(p.name for p in (PROJECT_DIR / "src").iterdir() if (p / "__init__.py").exists())
BOOT_SCRIPT = PROJECT_DIR / "runner" / "src" / "gpu_runner" / "user_data.sh"
# What each AWS CLI command in the boot script is authorized as.
BOOT_SCRIPT_ACTIONS = {
    ("ssm", "get-parameter"): "ssm:GetParameter",
    ("ssm", "delete-parameter"): "ssm:DeleteParameter",
    ("s3", "cp"): "s3:GetObject",
}
PUBLIC_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-x86_64-gp2"
INSTANCE_A = f"arn:aws:ec2:{REGION}:123456789012:instance/i-0aaaaaaaaaaaaaaaa"


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
        if s["Effect"] == "Allow"  # the Deny (runner mirror writes) only narrows
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


def test_stack_names_are_unique_per_repository_and_within_cloudformations_rules() -> None:
    """Two repositories baked with the same slug: two stacks (and so two instance profiles the policies name)."""
    names = {stack_name("ml-project", repo) for repo in ("octo-org/octo-repo", "other-org/octo-repo")}
    assert len(names) == 2
    # GitHub names are case-insensitive: one repository, one stack.
    assert stack_name("ml-project", "Octo-Org/Octo-Repo") == stack_name("ml-project", DEFAULT_REPOSITORY)
    for project in ("ml-project", "ml_project.v2", "p" * 300):
        name = stack_name(project, DEFAULT_REPOSITORY)
        # botocore's CloudFormation model: alphanumerics and hyphens, a letter first, at most 128 characters.
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,127}", name), name
        assert name.endswith("-" + repository_key(DEFAULT_REPOSITORY))


def test_bootstrap_refuses_a_prefix_another_repository_could_share(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`/gpu-runner/<slug>` (the old default) is the same in every repository baked with that slug."""
    settings_file = write_settings(tmp_path / "gpu-runner.yaml")
    raw = yaml.safe_load(settings_file.read_text())
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    argv = ["--settings", str(settings_file), "bootstrap", "--repository", DEFAULT_REPOSITORY, "--bucket",
            "good-bucket", "--template", str(TEMPLATE)]  # fmt: skip
    for prefix in ("/gpu-runner/ml-project", "/gpu-runner/other-org/octo-repo", "/octo-org/octo-repo"):
        settings_file.write_text(yaml.safe_dump({**raw, "ssm_prefix": prefix}))
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert f"ssm_prefix: '{prefix}' does not end with the repository" in err, err
        assert f"ssm_prefix: /gpu-runner/{DEFAULT_REPOSITORY}" in err
    assert calls == []
    assert prefix_problem("/gpu-runner/Octo-Org/Octo-Repo/", DEFAULT_REPOSITORY) is None


def test_a_second_bootstrap_refuses_to_move_or_widen_the_stacks_trust(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The stack trusts repository id 2002. A bootstrap that names another id (a recycled repository name) or
    none (any repository under that name) is refused before any change; before, it updated the trust."""
    argv = stack["argv"]
    other_id = [*argv[: argv.index("2002")], "3003", *argv[argv.index("2002") + 1 :]]
    start = argv.index("--owner-id")  # --owner-id 1001 --repository-id 2002, in that order
    without_ids = argv[:start] + argv[start + 4 :]
    assert "2002" not in without_ids and "--repository-id" not in without_ids
    for attempt, flag in ((other_id, "--repository-id gave '3003'"), (without_ids, "--owner-id gave ''")):
        assert cli.main(attempt) == 1
        err = capsys.readouterr().err
        assert f"stack {stack['name']} trusts another repository" in err and flag in err, err
        assert "delete-stack" in err
    _, subjects = _trust_subjects(role_of(stack["session"], stack["outputs"]["TrainRoleArn"]))
    assert any("@2002:" in subject for subject in subjects), subjects


def test_trust_conflicts_name_each_field_and_ignore_case() -> None:
    existing = {
        "GitHubOwner": "octo-org",
        "GitHubRepository": "octo-repo",
        "GitHubOwnerId": "",
        "GitHubRepositoryId": "",
    }
    assert trust_conflicts(existing, {**existing, "GitHubOwner": "Octo-Org"}) == []
    # Ids given where the stack had none narrow the trust: allowed.
    assert trust_conflicts(existing, {**existing, "GitHubOwnerId": "1", "GitHubRepositoryId": "2"}) == []
    assert trust_conflicts(existing, {**existing, "GitHubOwner": "other-org"}) == [
        "GitHubOwner is 'octo-org' (--repository gave 'other-org')"
    ]


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

    requests = authorizations(calls[launch_calls:], history=calls)
    reaper_policy = role_policies(stack, "ReaperRoleArn")
    denied = [r for r in requests if not allowed(reaper_policy, r)]
    assert denied == [], denied
    assert granted_actions(reaper_policy) == {r.action for r in requests}
    # And the reaper role cannot launch.
    launch = authorizations(calls[:launch_calls])
    assert not [r for r in launch if r.action == "ec2:RunInstances" and allowed(reaper_policy, r)]


# A tag key launch never writes (one a reaper or an operator might trust).
EXTRA_TAG = {"Key": "gpu-runner:keep-until", "Value": "2099-01-01T00:00:00Z"}


def _launch_requests(stack: dict[str, Any], extra_tag_on: str = "", **changes: Any) -> list[Request]:
    """The authorizations of one RunInstances as launch makes it (all of its tags), with one detail changed:
    `extra_tag_on` adds EXTRA_TAG to that resource type's tags."""
    profile = stack["outputs"]["RunnerInstanceProfile"]
    ec2 = stack["session"].client("ec2")
    amazon_image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
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
    source = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    image = ec2.copy_image(Name=f"own-{vpc}", SourceImageId=source, SourceRegion=REGION)["ImageId"]
    return {"subnet": subnet, "group": group, "default_group": default_group, "image": image}


def stack_vpc(stack: dict[str, Any]) -> str:
    group = stack["outputs"]["RunnerSecurityGroupId"]
    return (
        stack["session"]
        .client("ec2")
        .describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["VpcId"]
    )


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
    # The instance reads the parameter launch tagged with its own ARN (test_jit_config_isolation below).
    own = {"aws:ResourceTag/gpu-runner:instance-arn": INSTANCE_A, "ec2:SourceInstanceARN": INSTANCE_A}
    boot = [
        Request("ssm:GetParameter", parameter, own),
        Request("ssm:DeleteParameter", parameter, own),
        Request(
            "s3:GetObject",
            f"arn:aws:s3:::{bucket}/runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz",
            s3_context(),
        ),
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
    # The runner mirror: readable, never writable (issue 13, item 8), while the rest of the bucket stays writable.
    mirror = f"arn:aws:s3:::{bucket}/runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz"
    assert allowed([policy], Request("s3:GetObject", mirror, s3_context()))
    assert not allowed([policy], Request("s3:PutObject", mirror, s3_context()))
    assert not allowed([policy], Request("s3:DeleteObject", mirror, s3_context()))
    assert allowed([policy], Request("s3:PutObject", f"arn:aws:s3:::{bucket}/checkpoints/x", s3_context()))
    # Another bucket, another project's parameters: refused.
    assert not allowed(
        [policy], Request("s3:GetObject", "arn:aws:s3:::someone-else/data/a.png", s3_context())
    )
    # The bucket's name, owned by another account (ours deleted, the name taken): aws:ResourceAccount refuses it.
    stranger = s3_context("210987654321")
    for action, resource in (("s3:ListBucket", f"arn:aws:s3:::{bucket}"), ("s3:GetObject", f"arn:aws:s3:::{bucket}/data/a.png"),
                             ("s3:PutObject", f"arn:aws:s3:::{bucket}/checkpoints/x")):  # fmt: skip
        assert allowed([policy], Request(action, resource, s3_context())), action
        assert not allowed([policy], Request(action, resource, stranger)), action
    other = f"arn:aws:ssm:{REGION}:123456789012:parameter/gpu-runner/other-project/1-1/jitconfig"
    assert not allowed([policy], Request("ssm:GetParameter", other))


def test_make_bootstrap_passes_the_bucket_and_branches_the_workflows_use() -> None:
    """`make bootstrap` is what the README says to run: its flags parse, and the bucket, repository, branch
    prefix and default branch it deploys are the ones train.yml uses (bucket and prefix: the settings file's,
    the one source that launch hands on to the train job as the start job's `bucket` output)."""
    makefile = (PROJECT_DIR / "Makefile").read_text()
    recipe = re.search(r"^bootstrap:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe, "no bootstrap target in the Makefile"
    command = recipe.group(1).replace("\\\n", " ").replace("$(BOOTSTRAP_ARGS)", "")
    for name, value in re.findall(r"^(\w+) \?= (.*)$", makefile, flags=re.MULTILINE):
        command = command.replace(f"$({name})", value)
    words = shlex.split(command)
    args = cli._parser().parse_args(words[words.index("gpu-runner") + 1 :])
    assert args.command == "bootstrap" and str(args.settings) == "configs/gpu-runner.yaml"
    assert (args.bucket, args.branch_prefix) == ("", "")  # so bootstrap takes them from the settings
    settings = load_settings(PROJECT_DIR / args.settings)
    workflow = yaml.safe_load((PROJECT_DIR / ".github" / "workflows" / "train.yml").read_text())
    (train_step,) = [step for step in workflow["jobs"]["train"]["steps"] if step.get("id") == "train"]
    start_bucket = "$" + "{" * 2 + " needs.start.outputs.bucket " + "}" * 2  # verbatim file: no Jinja braces
    assert settings.bucket and train_step["env"]["BUCKET"] == start_bucket
    assert 'CHECKPOINT_URI="s3://${BUCKET}/checkpoints"' in train_step["run"]
    assert workflow[True]["push"]["branches"] == [f"{settings.train_branch_prefix}**"]
    answers = json.loads((PROJECT_DIR / ".cookiecutter.json").read_text())["cookiecutter"]
    assert args.repository == f"{answers['github_owner']}/{answers['github_repo']}"
    # The default branch the roles trust (DefaultBranch) is the one train.yml calls start and stop at.
    called = {job["uses"].rsplit("@", 1)[1] for job in (workflow["jobs"]["start"], workflow["jobs"]["stop"])}
    assert called == {args.default_branch}


# --- issue 13 item 4: one instance cannot read another run's JIT config -------------------------------------------
# moto evaluates neither IAM conditions nor key policies (iam_requests' docstring): these run the stack's deployed
# documents through the evaluator with the request context AWS would build. What stays unproven offline: that
# AWS puts ec2:SourceInstanceARN into an instance-profile session's SSM requests as documented, and that SSM's
# tag condition sees the tags PutParameter set in the same request (a first real push checks both: the boot log
# says "read the JIT config" and a second concurrent run's instance is refused).


def _launch_run(
    settings_file: Path, run_id: str, monkeypatch: pytest.MonkeyPatch, out: Path
) -> dict[str, str]:
    monkeypatch.setenv("GITHUB_RUN_ID", run_id)
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert cli.main(["--settings", str(settings_file), "launch", "--spot", "false"]) == 0
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def _parameter_request(action: str, session: boto3.Session, name: str, caller: str | None) -> Request:
    """The authorization of `action` on parameter `name` as the instance `caller` makes it (None: the request
    does not come from an instance-profile session, so ec2:SourceInstanceARN is absent)."""
    listed = session.client("ssm").list_tags_for_resource(ResourceType="Parameter", ResourceId=name)[
        "TagList"
    ]
    context = {f"aws:ResourceTag/{t['Key']}": t["Value"] for t in listed}
    if caller is not None:
        context["ec2:SourceInstanceARN"] = caller
    return Request(action, f"arn:aws:ssm:{REGION}:123456789012:parameter{name}", context)


def test_jit_config_isolation_each_instance_reads_and_deletes_only_its_own(
    stack: dict[str, Any],
    settings_file: Path,
    recorded: tuple[list[Call], boto3.Session],
    workflow_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Two concurrent runs, launched for real against the stack: instance B's role session can neither read nor
    delete A's config (nor A B's); each can its own; a session from no instance, none."""
    wire_settings(stack, settings_file)
    session = stack["session"]
    (runner_policy,) = managed_policies(session, runner_role_name(stack))
    runs = {key: _launch_run(settings_file, run_id, monkeypatch, tmp_path / key) for key, run_id in
            (("a", "7001"), ("b", "7002"))}  # fmt: skip
    arn = {k: f"arn:aws:ec2:{REGION}:123456789012:instance/{run['instance-id']}" for k, run in runs.items()}
    for action in ("ssm:GetParameter", "ssm:DeleteParameter"):
        for own, other in (("a", "b"), ("b", "a")):
            name = runs[own]["parameter"]
            assert allowed([runner_policy], _parameter_request(action, session, name, arn[own])), (
                action,
                own,
            )
            assert not allowed([runner_policy], _parameter_request(action, session, name, arn[other])), (
                f"instance {other} may {action} run {own}'s JIT config"
            )
            assert not allowed([runner_policy], _parameter_request(action, session, name, None))
    # A parameter under the prefix without the tag (written by hand, or by an older launch): nobody's.
    assert not allowed(
        [runner_policy],
        Request("ssm:GetParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter/gpu-runner/infra-test/x/jitconfig",
                {"ec2:SourceInstanceARN": arn["a"]}),
    )  # fmt: skip


def test_jit_config_key_only_the_runner_role_decrypts_and_only_through_ssm(stack: dict[str, Any]) -> None:
    """The customer-managed key: the launch role encrypts, the runner role decrypts, both only through Parameter
    Store and only for parameters under the prefix; no other principal of the account, whatever its IAM policies."""
    session, outputs, settings = stack["session"], stack["outputs"], stack["settings"]
    kms = session.client("kms")
    key_arn = outputs["JitConfigKeyArn"]
    aliases = {a["AliasName"]: a.get("TargetKeyId") for a in kms.list_aliases()["Aliases"]}
    alias = naming.jit_config_key_alias(settings.ssm_prefix)
    assert aliases[alias] == key_arn.rsplit("/", 1)[-1], "launch encrypts under this alias"
    raw = kms.get_key_policy(KeyId=key_arn, PolicyName="default")["Policy"]
    # AWS answers a JSON string; moto's CloudFormation keeps the template's KeyPolicy object as it was given.
    key_policy = raw if isinstance(raw, dict) else json.loads(raw)
    runner = session.client("iam").get_role(RoleName=runner_role_name(stack))["Role"]["Arn"]
    train = stack["outputs"]["TrainRoleArn"]
    reaper_role = stack["outputs"]["ReaperRoleArn"]
    ours = parameter_name(
        settings.ssm_prefix, RunContext(DEFAULT_REPOSITORY, "7001", "1", "train/x", "a" * 40)
    )
    elsewhere = "/someone-else/7001-1/jitconfig"
    everything = [
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "kms:*", "Resource": "*"}]}
    ]

    def may(principal: str, action: str, parameter: str = ours, via: str = "ssm", iam: Any = ()) -> bool:
        request = ssm_kms_request(action, REGION, key_arn, parameter, via)
        return key_policy_allows(key_policy, principal, list(iam), request)

    assert may(runner, "kms:Decrypt")
    assert not may(runner, "kms:Decrypt", via="")  # straight to KMS, outside Parameter Store
    assert not may(runner, "kms:Decrypt", via="ec2")
    assert not may(runner, "kms:Decrypt", parameter=elsewhere)
    assert not may(runner, "kms:Encrypt") and not may(runner, "kms:GenerateDataKey")
    assert may(train, "kms:Encrypt") and may(train, "kms:GenerateDataKey")  # standard and advanced tier
    assert not may(train, "kms:Decrypt"), "the launch role writes configs, it never reads one back"
    assert not may(train, "kms:GenerateDataKey", via="")
    # Another principal of the account, even one whose IAM policies allow kms:* everywhere.
    for principal in (reaper_role, "arn:aws:iam::123456789012:role/admin"):
        assert not may(principal, "kms:Decrypt", iam=everything)
        assert not may(principal, "kms:Encrypt", iam=everything)
    # The account may still administer the key (never locked out), not use it.
    admin = Request("kms:PutKeyPolicy", key_arn)
    assert key_policy_allows(key_policy, "arn:aws:iam::123456789012:role/admin", everything, admin)
