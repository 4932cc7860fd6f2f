"""max_live_instances (issue 30, Low): `launch` counts this repository's live GPU instances before the JIT config
and RunInstances and refuses the next one at the limit, naming the count, the limit and the fix. Against the moto
server and the GitHub double; the count's one call against the deployed launch roles' policies."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from gpu_runner import cli
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import LaunchBlockedError, SettingsError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import lifecycle, live_limit
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, GitHubDouble
from gpu_runner_testing.gpu_runner_stack import REGION as STACK_REGION
from gpu_runner_testing.gpu_runner_stack import authorizations, role_policies, wire_settings
from gpu_runner_testing.iam_requests import Call, allowed
from gpu_runner_testing.live_instances import run_as_launched


def other_run(ctx: RunContext, run_id: str, **changes: str) -> RunContext:
    return dataclasses.replace(ctx, run_id=run_id, **changes)


def parameter_names(aws: Aws) -> set[str]:
    pages = aws.client("ssm", REGION).get_paginator("describe_parameters").paginate()
    return {p["Name"] for page in pages for p in page["Parameters"]}


def test_a_launch_at_the_limit_is_refused_before_anything_exists(
    settings: Settings, ctx: RunContext, aws: Aws, github: GitHubRunners, github_double: GitHubDouble
) -> None:
    limited = dataclasses.replace(settings, max_live_instances=2)
    first = lifecycle.launch(limited, other_run(ctx, "801"), aws, github)
    second = lifecycle.launch(limited, other_run(ctx, "802", slot="3"), aws, github)  # a sweep leg counts too
    runners, parameters = set(github_double.runners), parameter_names(aws)
    with pytest.raises(LaunchBlockedError) as refused:
        lifecycle.launch(limited, ctx, aws, github)
    assert str(refused.value) == (
        f"max_live_instances: 2 GPU instance(s) of {DEFAULT_REPOSITORY} are live (pending or running), the limit "
        "is 2; nothing launched. Wait for a run to finish or cancel one, or raise max_live_instances in the "
        "default branch's configs/gpu-runner.yaml"
    )
    # No registration, no parameter, no instance: the count came before the JIT config and RunInstances.
    assert set(github_double.runners) == runners and parameter_names(aws) == parameters
    live = live_limit.live_instances(aws.client("ec2", REGION), DEFAULT_REPOSITORY)
    assert live == sorted([first.launched.instance_id, second.launched.instance_id])
    # One ends: the next launch goes through.
    aws.client("ec2", REGION).terminate_instances(InstanceIds=[first.launched.instance_id])
    assert lifecycle.launch(limited, ctx, aws, github).launched.instance_id


def test_only_this_repositorys_live_gpu_runner_instances_count(
    settings: Settings, ctx: RunContext, aws: Aws, github: GitHubRunners, ami: str
) -> None:
    limited = dataclasses.replace(settings, max_live_instances=1)
    client = aws.client("ec2", REGION)
    run_as_launched(
        aws.client("ec2", REGION), ami, settings, other_run(ctx, "803", repository="octo-org/other-repo")
    )
    run_as_launched(aws.client("ec2", REGION), ami, settings, None)  # not gpu-runner's
    stopped = run_as_launched(aws.client("ec2", REGION), ami, settings, other_run(ctx, "804"))
    client.stop_instances(InstanceIds=[stopped])  # not billed by the hour (EBS only): not live
    ended = run_as_launched(aws.client("ec2", REGION), ami, settings, other_run(ctx, "805"))
    client.terminate_instances(InstanceIds=[ended])
    try:
        assert live_limit.live_instances(client, DEFAULT_REPOSITORY) == []
        assert lifecycle.launch(limited, ctx, aws, github).launched.instance_id
    finally:  # the aws fixture ends only the running ones it finds
        client.terminate_instances(InstanceIds=[stopped])


def test_without_a_limit_launch_does_not_count(settings: Settings, ctx: RunContext, aws: Aws, github) -> None:
    calls: list[str] = []
    aws.client("ec2", REGION).meta.events.register(
        "before-call.ec2.DescribeInstances", lambda **_: calls.append("DescribeInstances")
    )
    assert settings.max_live_instances is None
    lifecycle.launch(settings, ctx, aws, github)
    assert calls == []


def test_launches_that_count_at_once_can_pass_the_limit_as_documented(
    settings: Settings, ctx: RunContext, aws: Aws, github: GitHubRunners
) -> None:
    """The count and RunInstances are two calls: a second launch that counts before the first's RunInstances sees
    nothing live and goes through (manual/gpu-training.md: at most the racing launches less one over the limit)."""
    limited = dataclasses.replace(settings, max_live_instances=1)
    client = aws.client("ec2", REGION)
    raced: list[str] = []

    def second_launch_counts_now(**_: object) -> None:
        if not raced:  # the first RunInstances only (the second launch's own comes through here too)
            raced.append("counting")
            raced.append(lifecycle.launch(limited, other_run(ctx, "806"), aws, github).launched.instance_id)

    # launch's RunInstances goes through its single-attempt client (ec2.launch_instance).
    aws.single_attempt_client("ec2", REGION).meta.events.register(
        "before-call.ec2.RunInstances", second_launch_counts_now
    )
    first = lifecycle.launch(limited, ctx, aws, github)
    assert len(live_limit.live_instances(client, DEFAULT_REPOSITORY)) == 2 == limited.max_live_instances + 1
    assert raced and first.launched.instance_id not in raced


@pytest.mark.parametrize("bad", [0, -1, "4", 2.5, True])
def test_a_bad_limit_is_refused_naming_the_key_and_the_fix(bad: object) -> None:
    with pytest.raises(
        SettingsError, match=r"max_live_instances: must be a positive integer, or null for no limit"
    ):
        Settings(project="demo", region=REGION, instance_types=("g4dn.xlarge",), max_live_instances=bad)  # type: ignore[arg-type]
    assert Settings(project="demo", region=REGION, instance_types=("g4dn.xlarge",), max_live_instances=3)


@pytest.mark.parametrize("role", ["TrainRoleArn", "PredictLaunchRoleArn"])
def test_the_count_is_within_both_launch_roles_policies(
    role: str,
    stack: dict[str, Any],
    settings_file: Path,
    recorded: tuple[list[Call], boto3.Session],
    workflow_env: dict[str, str],
    github_double: GitHubDouble,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A refused launch, call by call against the deployed stack's policies: the count is the launch role's own
    ec2:DescribeInstances (DescribeAndPrices), nothing new to grant."""
    calls, _ = recorded
    wire_settings(stack, settings_file)
    limited = tmp_path / "gpu-runner.yaml"
    limited.write_text(yaml.safe_dump({**yaml.safe_load(settings_file.read_text()), "max_live_instances": 1}))
    outside = boto3.Session(region_name=STACK_REGION).client("ec2")  # made outside the recorded session
    other = RunContext(DEFAULT_REPOSITORY, "807", "1", "train/x", "a" * 40)
    made = run_as_launched(outside, stack["amazon_image"], stack["settings"], other)
    try:
        assert cli.main(["--settings", str(limited), "launch", "--spot", "false"]) == 1
        assert "max_live_instances: 1 GPU instance(s) of" in capsys.readouterr().err
        requests = authorizations(calls)
        assert "ec2:DescribeInstances" in {r.action for r in requests}
        assert "ec2:RunInstances" not in {r.action for r in requests}
        denied = [r for r in requests if not allowed(role_policies(stack, role), r)]
        assert denied == [], denied
        assert github_double.runners == {}
    finally:
        outside.terminate_instances(InstanceIds=[made])
