"""The roles' trust policies against IAM's "Role trust policy length" quota: measured from the template as
bootstrap deploys it (equal to what the moto server holds), and a repository whose names would overflow it
refused before CloudFormation is called."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from gpu_runner import cli
from gpu_runner.core.aws import Aws
from gpu_runner.setup import trust_size
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.gpu_runner_stack import REGION, role_of, write_settings
from gpu_runner_testing.iam_requests import record_calls
from gpu_runner_testing.stack_deploy import TEMPLATE, TEST_PLATFORM

ROLES = {
    "TrainRole": "TrainRoleArn",
    "ReaperRole": "ReaperRoleArn",
    "SweepRole": "SweepRoleArn",
    "PredictRole": "PredictRoleArn",
    "PredictLaunchRole": "PredictLaunchRoleArn",
    "PromoteRole": "PromoteRoleArn",
}
# GitHub's longest names: 39 characters for an account (GitHub Docs, "Username considerations for external
# authentication"), 100 for a repository (the REST API's `name` limit).
LONG_REPOSITORY = f"{'o' * 39}/{'r' * 100}"
# The launch roles name the platform's workflows at a full commit SHA (bootstrap's --platform): the template
# repository's name and 40 hex digits in each of their subjects.
PLATFORM = dict(zip(("PlatformRepository", "PlatformCommit"), TEST_PLATFORM.split("@"), strict=True))


def test_the_measured_lengths_are_the_deployed_policies(stack: dict[str, Any]) -> None:
    session, outputs = stack["session"], stack["outputs"]
    described = session.client("cloudformation").describe_stacks(StackName=stack["name"])["Stacks"][0]
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in described["Parameters"]}
    measured = trust_size.trust_lengths(TEMPLATE.read_text(encoding="utf-8"), parameters, REGION)
    deployed = {
        name: len(
            json.dumps(role_of(session, outputs[output])["AssumeRolePolicyDocument"], separators=(",", ":"))
        )
        for name, output in ROLES.items()
    }
    assert measured == deployed
    # The train role's eight subjects (train and sweep branches, start and stop, both forms) are the longest.
    assert max(measured, key=measured.__getitem__) == "TrainRole"
    assert measured["TrainRole"] <= trust_size.DEFAULT_QUOTA


def test_the_default_branch_launches_fit_beside_the_train_role() -> None:
    """Issue 16: predict.yml's gpu start and stop jobs run on the default branch. Four more subjects (start, stop,
    both forms) in the train role's trust would overflow the default quota even for short names; a role of their
    own leaves the train role's trust as it was (1,554 characters here, measured 2026-12; 2,142 with the four
    subjects added) and is shorter than it (942). Since the launch workflows are the platform's at a commit
    (issue 31), 1,794 and 1,062 with the test platform's name and SHA."""
    parameters = {"GitHubOwner": "octo-org", "GitHubRepository": "octo-repo", "GitHubOwnerId": "1" * 9,
                  "GitHubRepositoryId": "2" * 10, "TrainBranchPrefix": "train/", "SweepBranchPrefix": "sweep/",
                  **PLATFORM}  # fmt: skip
    lengths = trust_size.trust_lengths(TEMPLATE.read_text(encoding="utf-8"), parameters, REGION)
    assert max(lengths, key=lengths.__getitem__) == "TrainRole", lengths
    assert lengths["TrainRole"] <= trust_size.DEFAULT_QUOTA
    assert set(lengths) == set(ROLES)


@pytest.mark.parametrize(
    ("owner_and_name", "quota", "refused"),
    [
        (LONG_REPOSITORY, 2048.0, {"TrainRole"}),
        (LONG_REPOSITORY, 4096.0, set()),
        (f"{'o' * 30}/{'r' * 30}", 2048.0, {"TrainRole"}),
        ("octo-org/octo-repo", 2048.0, set()),
    ],
    ids=[
        "longest-names-default-quota",
        "longest-names-raised-quota",
        "60-characters-default-quota",
        "short-names",
    ],
)
def test_which_roles_a_quota_refuses(owner_and_name: str, quota: float, refused: set[str]) -> None:
    owner, _, name = owner_and_name.partition("/")
    parameters = {"GitHubOwner": owner, "GitHubRepository": name, "GitHubOwnerId": "1" * 9, "GitHubRepositoryId": "2" * 10,
                  "TrainBranchPrefix": "train/", "SweepBranchPrefix": "sweep/", **PLATFORM}  # fmt: skip
    lengths = trust_size.trust_lengths(TEMPLATE.read_text(encoding="utf-8"), parameters, REGION)
    problems = trust_size.too_long(lengths, quota)
    assert {line.split("'", 1)[0] for line in problems} == refused, problems
    assert all(f"--quota-code {trust_size.QUOTA_CODE} --desired-value 4096" in line for line in problems)


def test_bootstrap_refuses_names_that_overflow_the_quota_before_cloudformation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], moto_endpoint: str
) -> None:
    """No value applied to the quota (Service Quotas answers NoSuchResourceException), so the default holds: the
    stack is never created, and the line names the role, its length and the increase to request."""
    settings_file = write_settings(tmp_path / "gpu-runner.yaml")
    raw = yaml.safe_load(settings_file.read_text())
    settings_file.write_text(yaml.safe_dump({**raw, "ssm_prefix": f"/gpu-runner/{LONG_REPOSITORY}"}))
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    faults = AwsFaults(session)
    faults.fail("service-quotas", "GetServiceQuota", "NoSuchResourceException")
    faults.answer(
        "service-quotas", "GetAWSDefaultServiceQuota",
        {"Quota": {"ServiceCode": "iam", "QuotaCode": trust_size.QUOTA_CODE, "Value": 2048.0}},
    )  # fmt: skip
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    argv = ["--settings", str(settings_file), "bootstrap", "--repository", LONG_REPOSITORY, "--bucket", "long-names",
            "--platform", TEST_PLATFORM, "--template", str(TEMPLATE)]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "TrainRole's trust policy would be " in err and "quota (2048; the default is 2048)" in err, err
    assert {(c.service, c.region) for c in calls if c.service == "service-quotas"} == {
        ("service-quotas", trust_size.QUOTA_REGION)
    }
    assert not [c for c in calls if c.service in {"cloudformation", "s3"}], calls
