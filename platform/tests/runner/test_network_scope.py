"""Launch refuses an empty security_group_ids before any API call (issue 13, item 9): EC2 would otherwise put
the instance in the VPC's default group, open to every other instance in it. The IAM side (only the stack's
group, subnets of its VPC, images of the expected owners) is in test_train_policy.py."""

from __future__ import annotations

from dataclasses import replace

import boto3
import pytest

from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import lifecycle
from gpu_runner_testing.github_double import GitHubDouble
from gpu_runner_testing.iam_requests import record_calls


def test_launch_without_a_security_group_is_refused_before_any_call(
    settings: Settings,
    ctx: RunContext,
    github: GitHubRunners,
    github_double: GitHubDouble,
    moto_endpoint: str,
) -> None:
    session = boto3.Session(region_name=settings.region)
    calls = record_calls(session)
    with pytest.raises(SettingsError, match=r"security_group_ids: empty, so EC2 would use the VPC's default"):
        lifecycle.launch(replace(settings, security_group_ids=()), ctx, Aws(session), github)
    assert calls == [], "nothing was asked of AWS"
    assert github_double.runners == {}, "no runner was registered"
