"""`gpu-runner bootstrap` deploying gpu_runner/setup/gpu-runner.yaml to the moto server: what it prints, what it
refuses, and a re-run. (That a project's `make bootstrap` is a command the CLI accepts, with the bucket and branches
its train.yml uses, is the project's own test_make_targets.)"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from gpu_runner import cli
from gpu_runner.core.aws import Aws
from gpu_runner.core.stack_names import repository_key
from gpu_runner.setup.stack import (
    BootstrapError,
    StackInputs,
    credential_writer,
    prefix_problem,
    stack_name,
    trust_conflicts,
)
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    _trust_subjects,
    role_of,
    write_settings,
)
from gpu_runner_testing.iam_requests import (
    record_calls,
)
from gpu_runner_testing.stack_deploy import TEMPLATE, TEST_PLATFORM


def test_bootstrap_deploys_and_prints_the_github_settings(stack: dict[str, Any]) -> None:
    outputs, printed, session = stack["outputs"], stack["printed"], stack["session"]
    repo = DEFAULT_REPOSITORY
    assert f"gh variable set AWS_ROLE_ARN --repo {repo} --body {outputs['TrainRoleArn']}" in printed
    assert f"gh variable set AWS_REAPER_ROLE_ARN --repo {repo} --body {outputs['ReaperRoleArn']}" in printed
    assert f"gh variable set AWS_SWEEP_ROLE_ARN --repo {repo} --body {outputs['SweepRoleArn']}" in printed
    # Issue 16: predict.yml's own jobs, and its gpu device's start and stop jobs.
    assert f"gh variable set AWS_PREDICT_ROLE_ARN --repo {repo} --body {outputs['PredictRoleArn']}" in printed
    assert (
        f"gh variable set AWS_PREDICT_LAUNCH_ROLE_ARN --repo {repo} --body {outputs['PredictLaunchRoleArn']}"
        in printed
    )
    # Issue 30: promote.yml reads the held-out set with its own role.
    assert f"gh variable set AWS_PROMOTE_ROLE_ARN --repo {repo} --body {outputs['PromoteRoleArn']}" in printed
    # The stack was given both prefixes of the settings (their one source; no default in the template).
    parameters = {
        p["ParameterKey"]: p["ParameterValue"]
        for p in session.client("cloudformation").describe_stacks(StackName=stack["name"])["Stacks"][0][
            "Parameters"
        ]
    }
    settings = stack["settings"]
    assert (parameters["TrainBranchPrefix"], parameters["SweepBranchPrefix"]) == (
        settings.train_branch_prefix, settings.sweep_branch_prefix,
    )  # fmt: skip
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
        # The settings' prefixes are the one source: another value on the command line is refused, and so are
        # bad characters and overlapping prefixes (the settings refuse those too, before bootstrap).
        ("--sweep-branch-prefix", "hpo/", "--sweep-branch-prefix: 'hpo/' differs from sweep_branch_prefix: 'sweep/'"),
        ("--branch-prefix", "gpu/", "--branch-prefix: 'gpu/' differs from train_branch_prefix: 'train/'"),
    ],
)  # fmt: skip
def test_bootstrap_refuses_bad_input_before_any_call(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    message: str,
) -> None:
    # A settings file of its own: the shared stack's bootstrap wrote its bucket into the fixture's.
    settings_file = write_settings(tmp_path / "gpu-runner.yaml")
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    args = {
        "--repository": DEFAULT_REPOSITORY,
        "--bucket": "good-bucket",
        "--template": str(TEMPLATE),
        # Named: a project's bootstrap reads the pin in its pyproject.toml, and the platform's tests run in none.
        "--platform": TEST_PLATFORM,
        flag: value,
    }
    if flag == "--owner-id":
        args["--repository-id"] = "2002"
    argv = ["--settings", str(settings_file), "bootstrap", *[x for kv in args.items() for x in kv]]
    assert cli.main(argv) == 1
    assert message in capsys.readouterr().err
    assert calls == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sweep_branch_prefix": "sweep dir/"}, "--sweep-branch-prefix: 'sweep dir/' may only hold"),
        (
            {"train_branch_prefix": "train/", "sweep_branch_prefix": "train/"},
            "overlaps the train branch prefix",
        ),
        (
            {"train_branch_prefix": "gpu/train/", "sweep_branch_prefix": "gpu/"},
            "overlaps the train branch prefix",
        ),
        (
            {"default_branch": "sweep/main"},
            "--sweep-branch-prefix: the default branch 'sweep/main' starts with",
        ),
        ({"default_branch": "train/main"}, "--branch-prefix: the default branch 'train/main' starts with"),
    ],
    ids=["bad-character", "equal", "train-under-sweep", "default-under-sweep", "default-under-train"],
)
def test_stack_inputs_refuse_prefixes_the_roles_could_not_keep_apart(
    changes: dict[str, str], message: str
) -> None:
    """StackInputs is what `bootstrap` deploys: a sweep prefix that overlaps the train prefix, or a default branch
    under either, would let one role's trust admit the other's branches (or every push to the default branch)."""
    inputs = {"repository": DEFAULT_REPOSITORY, "bucket": "good-bucket", "train_branch_prefix": "train/",
              "sweep_branch_prefix": "sweep/", **changes}  # fmt: skip
    with pytest.raises(BootstrapError, match=re.escape(message)):
        StackInputs(**inputs)


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
            "good-bucket", "--template", str(TEMPLATE), "--platform", TEST_PLATFORM]  # fmt: skip
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
            "--oidc-provider-arn", oidc_provider, "--template", str(TEMPLATE), "--platform", TEST_PLATFORM]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "BucketAlreadyExists" in err and "--bucket" in err, err


def test_the_credential_writer_is_the_iam_principal_running_bootstrap(moto_endpoint: str) -> None:
    """The GitHub credential's key lets only bootstrap's caller encrypt (aws:PrincipalArn): for a role session
    that is the role's ARN with its path (IAM knows it, the session ARN does not hold it), for a user its ARN.
    A caller no key policy can name is refused when bootstrap stores the credential, and names nobody else."""
    session = boto3.Session(region_name=REGION)
    iam = session.client("iam")
    trust = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "sts:AssumeRole"}
    ]}  # fmt: skip
    name = f"admin-{uuid.uuid4().hex[:8]}"
    role = iam.create_role(RoleName=name, Path="/ops/", AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    assert role["Arn"].endswith(f":role/ops/{name}")
    creds = session.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="alice")["Credentials"]
    as_role = boto3.Session(
        aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"], region_name=REGION,
    )  # fmt: skip
    assert as_role.client("sts").get_caller_identity()["Arn"].endswith(f":assumed-role/{name}/alice")
    assert credential_writer(as_role.client("sts"), as_role.client("iam"), storing=True) == role["Arn"]
    user = iam.create_user(UserName=f"deployer-{uuid.uuid4().hex[:8]}")["User"]
    key = iam.create_access_key(UserName=user["UserName"])["AccessKey"]
    as_user = boto3.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name=REGION
    )
    assert credential_writer(as_user.client("sts"), as_user.client("iam"), storing=True) == user["Arn"]
    # moto's caller for unknown keys (arn:aws:sts::123456789012:user/moto) stands for a federated user here.
    assert credential_writer(session.client("sts"), iam, storing=False) == ""
    with pytest.raises(BootstrapError, match="--credential-writer-arn: bootstrap runs as arn:aws:sts::"):
        credential_writer(session.client("sts"), iam, storing=True)
    # And a flag that names no role or user is refused before anything is deployed.
    with pytest.raises(
        BootstrapError, match="--credential-writer-arn: 'arn:aws:sts::123456789012:assumed-role/x/y'"
    ):
        StackInputs(
            repository=DEFAULT_REPOSITORY, bucket="some-bucket", train_branch_prefix="train/",
            sweep_branch_prefix="sweep/", credential_writer_arn="arn:aws:sts::123456789012:assumed-role/x/y",
        )  # fmt: skip
