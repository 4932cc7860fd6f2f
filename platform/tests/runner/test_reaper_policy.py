"""The reaper role's policy: the reaper run with exactly the permissions it grants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from gpu_runner import cli
from gpu_runner.core import credential
from gpu_runner.core.aws import Aws
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.settings import load_settings
from gpu_runner.ec2_runner import reaper
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, GitHubDouble
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    authorizations,
    role_policies,
    wire_settings,
)
from gpu_runner_testing.iam_requests import (
    Call,
    allowed,
    granted_actions,
)


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
        settings, session.client("ssm", region_name=REGION), {"GITHUB_API_URL": github_double.url},
        kms=session.client("kms", region_name=REGION),
    )  # fmt: skip
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
