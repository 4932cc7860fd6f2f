"""The triggers and "left running" claims of the runner side's "Bad input" rows (docs/bad-input.md): one trigger
per table id (`gpu-runner`, its settings file, the AWS / GitHub answers to a launch), each giving the bad input
for real, and each claim checked against the moto server and the GitHub REST double.

tests/runner/test_bad_input_runner.py runs them; the training side's are in tests/bad_input_triggers.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from gpu_runner_testing.aws_constants import AMI_PARAMETER, REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import (
    DEFAULT_APP_ID,
    DEFAULT_REPOSITORY,
    READ_ONLY_TOKEN,
    GitHubDouble,
    app_private_key_pem,
)
from gpu_runner_testing.live_instances import run_as_launched

from gpu_runner import cli
from gpu_runner.core import naming
from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import Settings

PROJECT = "demo"  # cli_env's settings
SSM_PREFIX = "/gpu-runner/demo/"
SETTINGS = "gpu-runner.yaml"  # cli_env writes it into the working directory


@dataclass
class Case:
    aws: Aws
    faults: AwsFaults
    github: GitHubDouble
    monkeypatch: pytest.MonkeyPatch
    aws_requests: list[str]
    stack: list[Callable[[], None]] = field(default_factory=list)
    earlier_runner: int | None = None
    earlier_instance: str | None = None


def gpu_runner(*argv: str) -> int:
    """`gpu-runner --settings gpu-runner.yaml ...` in-process; argparse's exit status counts like main()'s."""
    try:
        return cli.main(["--settings", SETTINGS, *argv])
    except SystemExit as stopped:
        return int(stopped.code or 0)


def launch_with(**settings: Any) -> Callable[[Case], int]:
    """A launch with these keys changed in the settings file."""

    def trigger(case: Case) -> int:
        path = Path(SETTINGS)
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **settings}))
        return gpu_runner("launch")

    return trigger


def launch_when(service: str, operation: str, code: str, status: int = 400) -> Callable[[Case], int]:
    """A launch during which AWS answers every `operation` call with its real `code` error document."""

    def trigger(case: Case) -> int:
        case.faults.fail(service, operation, code, times=-1, status=status)
        return gpu_runner("launch")

    return trigger


def launch_env(**env: str | None) -> Callable[[Case], int]:
    """A launch with these environment variables set (None: unset)."""

    def trigger(case: Case) -> int:
        for key, value in env.items():
            if value is None:
                case.monkeypatch.delenv(key, raising=False)
            else:
                case.monkeypatch.setenv(key, value)
        return gpu_runner("launch")

    return trigger


def name_taken(case: Case) -> int:
    """A registration left by an earlier launch of the same run attempt (e.g. a crashed launch re-run)."""
    case.earlier_runner = case.github.add_runner("gpu-runner-4321-2", labels=["gpu-runner-4321-2"])["id"]
    return gpu_runner("launch")


def at_the_live_limit(case: Case) -> int:
    """Another run's GPU instance of the repository is running (made with the tags its launch gave it), and the
    settings allow one live instance."""
    # Not through case.aws: the trigger's calls are not gpu-runner's.
    ec2 = boto3.client("ec2", region_name=REGION)
    image = boto3.client("ssm", region_name=REGION).get_parameter(Name=AMI_PARAMETER)["Parameter"]["Value"]
    other = naming.RunContext(DEFAULT_REPOSITORY, "4000", "1", "train/other", "a" * 40)
    settings = Settings(project=PROJECT, region=REGION, instance_types=("g4dn.xlarge",))
    case.earlier_instance = run_as_launched(ec2, image, settings, other)
    return launch_with(max_live_instances=1)(case)


def invalid_request(case: Case) -> int:
    case.github.fail("POST", r"/generate-jitconfig$", 422)
    return gpu_runner("launch")


def app_not_installed(case: Case) -> int:
    """A GitHub App that is installed on another repository of the owner, not on this one."""
    double = GitHubDouble(
        repositories=(DEFAULT_REPOSITORY, "octo-org/other"), app_repositories=("octo-org/other",)
    ).start()
    case.stack.append(double.stop)
    case.github = double
    return launch_env(
        GITHUB_API_URL=double.url,
        GPU_RUNNER_TOKEN=None,
        GPU_RUNNER_APP_ID=str(DEFAULT_APP_ID),
        GPU_RUNNER_APP_PRIVATE_KEY=app_private_key_pem(),
    )(case)


TRIGGERS: dict[str, Callable[[Case], int]] = {
    "runner-missing-settings": lambda case: cli.main(["--settings", "nope.yaml", "launch"]),
    "runner-bad-spot-flag": lambda case: gpu_runner("launch", "--spot", "maybe"),
    "runner-bad-instance-type-flag": lambda case: gpu_runner("launch", "--instance-type", "g5.xlarge;reboot"),
    "runner-no-repository": launch_env(GITHUB_REPOSITORY=None),
    "runner-bad-slot": lambda case: gpu_runner("launch", "--slot=007"),
    "runner-bad-wanted": lambda case: gpu_runner("capacity", "--wanted=0"),
    "runner-pr-comment-bad-run-id": lambda case: gpu_runner(
        "pr-comment", "--kind=train", "--mlflow-run-id=--x", "--branch=train/demo"
    ),
    "runner-pr-comment-bad-kind": lambda case: gpu_runner(
        "pr-comment",
        "--kind=deploy",
        "--mlflow-run-id=0123456789abcdef0123456789abcdef",
        "--branch=train/demo",
    ),
    "settings-unknown-key": launch_with(instance_typo="g5.xlarge"),
    "settings-bad-region": launch_with(region="Europe"),
    "settings-idle-timeout": launch_with(idle_timeout_minutes=200, max_runtime_minutes=180),
    "settings-sweep-prefix-overlaps": launch_with(
        sweep_branch_prefix="train/hpo/", train_branch_prefix="train/"
    ),
    "settings-wait-timeout-type": launch_with(wait_timeout_seconds="10m"),
    "settings-max-live-instances": launch_with(max_live_instances=0),
    "aws-ami-parameter-missing": launch_with(ami_parameter="/no/such/ami"),
    "aws-ami-not-found": launch_with(ami_id="ami-0123456789abcdef0"),
    "aws-expired-credentials": launch_when("ssm", "GetParameter", "ExpiredTokenException"),
    "aws-unauthorized": launch_when("ec2", "RunInstances", "UnauthorizedOperation", status=403),
    "aws-vcpu-limit": launch_when("ec2", "RunInstances", "VcpuLimitExceeded"),
    "aws-capacity-everywhere": launch_when("ec2", "RunInstances", "InsufficientInstanceCapacity", status=500),
    "aws-subnet-not-found": launch_with(subnet_ids=["subnet-0123456789abcdef0"]),
    "aws-max-live-instances": at_the_live_limit,
    "github-no-credentials": launch_env(GPU_RUNNER_TOKEN=None),
    "github-bad-token": launch_env(GPU_RUNNER_TOKEN="github_pat_revoked_0000000000"),
    "github-no-admin-permission": launch_env(GPU_RUNNER_TOKEN=READ_ONLY_TOKEN),
    "github-repo-not-found": launch_env(GITHUB_REPOSITORY="octo-org/no-such-repo"),
    "github-runner-name-taken": name_taken,
    "github-invalid-request": invalid_request,
    "github-app-not-installed": app_not_installed,
    "github-app-bad-key": launch_env(
        GPU_RUNNER_TOKEN=None, GPU_RUNNER_APP_ID="424242", GPU_RUNNER_APP_PRIVATE_KEY="not-a-key"
    ),
}


# ---------------------------------------------------------------------- "left running" claims
def no_call(case: Case) -> None:
    assert case.aws_requests == []
    assert case.github.calls == []


def no_instance(case: Case) -> None:
    reply = case.aws.client("ec2", REGION).describe_instances(
        Filters=[
            {"Name": f"tag:{naming.TAG_PROJECT}", "Values": [PROJECT]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
    )
    assert [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]] == []


def only_the_earlier_instance(case: Case) -> None:
    assert case.earlier_instance is not None
    reply = case.aws.client("ec2", REGION).describe_instances(
        Filters=[
            {"Name": f"tag:{naming.TAG_PROJECT}", "Values": [PROJECT]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
    )
    assert [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]] == [case.earlier_instance]


def no_registration(case: Case) -> None:
    assert case.github.runners == {}


def only_the_earlier_registration(case: Case) -> None:
    assert case.earlier_runner is not None
    assert set(case.github.runners) == {case.earlier_runner}


def no_parameter(case: Case) -> None:
    parameters = case.aws.client("ssm", REGION).describe_parameters()["Parameters"]
    assert [p["Name"] for p in parameters if p["Name"].startswith(SSM_PREFIX)] == []


CLAIMS: dict[str, Callable[[Case], None]] = {
    "no AWS or GitHub call made": no_call,
    "no instance": no_instance,
    "only the earlier instance": only_the_earlier_instance,
    "no runner registration": no_registration,
    "only the earlier registration": only_the_earlier_registration,
    "no SSM parameter": no_parameter,
}
