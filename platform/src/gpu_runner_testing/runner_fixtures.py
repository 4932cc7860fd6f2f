"""The runner tests' fixtures, as a pytest plugin: local doubles of the services the runner lifecycle talks to.

AWS is a real moto server (pytest_plugin's `moto_endpoint`) reached through a boto3 session on which `AwsFaults`
can inject error answers; GitHub is the REST double in github_double.py. The platform's tests load it with
`pytest_plugins`; a project's tests/runner/conftest.py imports the fixtures by name, so they stay in that folder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
import yaml

from gpu_runner.core.aws import Aws
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner_testing import live_instances
from gpu_runner_testing.aws_constants import AMI_PARAMETER, OTHER_REGION, REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, DEFAULT_TOKEN, GitHubDouble

# The stack the infra tests (test_stack_*, test_*_policy, test_role_trust, test_key_policies) deploy, one per process
# (re-exported: a conftest that imports the fixtures by name takes them from here).
from gpu_runner_testing.gpu_runner_stack import ami_for_infra, recorded, settings_file, stack, workflow_env  # noqa: F401
from gpu_runner_testing.security_groups import runner_security_group
from gpu_runner_testing.stack_deploy import oidc_provider_arn


@pytest.fixture
def github_double() -> Iterator[GitHubDouble]:
    """A fresh GitHub REST double per test (its own port and state), stopped afterwards even if the test fails."""
    with GitHubDouble() as double:
        yield double


@pytest.fixture
def github(github_double: GitHubDouble) -> Iterator[GitHubRunners]:
    env = {"GPU_RUNNER_TOKEN": DEFAULT_TOKEN, "GITHUB_API_URL": github_double.url}
    with GitHubRunners.from_env(
        DEFAULT_REPOSITORY, env=env, backoff_seconds=0.01, busy_timeout_seconds=2
    ) as client:
        yield client


@pytest.fixture(scope="session")
def oidc_provider(moto_endpoint: str) -> str:
    return oidc_provider_arn()


@pytest.fixture
def session(moto_endpoint: str) -> boto3.Session:
    return boto3.Session(region_name=REGION)


@pytest.fixture
def faults(session: boto3.Session) -> AwsFaults:
    return AwsFaults(session)


@pytest.fixture
def aws(session: boto3.Session, faults: AwsFaults) -> Iterator[Aws]:
    # moto keeps state for the whole session: leave no running instance or parameter to the next test, and
    # terminate only the instances this test started (live_instances says why).
    before = {
        region: live_instances.live_ids(session.client("ec2", region)) for region in (REGION, OTHER_REGION)
    }
    aws = Aws(session)
    yield aws
    for region in {region for _, region in aws._clients}:
        live_instances.terminate_started_since(aws.client("ec2", region), before.get(region, set()))
        ssm = aws.client("ssm", region)
        # Every page: once a test has read one of AWS's public parameters (/aws/service/...), moto lists them
        # too, and the first page alone would hide a leftover of ours.
        names = [
            p["Name"]
            for page in ssm.get_paginator("describe_parameters").paginate()
            for p in page.get("Parameters", [])
            if p["Name"] != AMI_PARAMETER and not p["Name"].startswith("/aws/")
        ]
        for start in range(0, len(names), 10):  # DeleteParameters takes at most 10 names
            ssm.delete_parameters(Names=names[start : start + 10])


@pytest.fixture
def ami(aws: Aws, amazon_image: Callable[[str], str]) -> str:
    """A moto AMI, published under a configurable SSM path like the Deep Learning AMI's (moto has none)."""
    ami_id = amazon_image(REGION)
    aws.client("ssm", REGION).put_parameter(Name=AMI_PARAMETER, Value=ami_id, Type="String", Overwrite=True)
    return ami_id


@pytest.fixture
def security_group(aws: Aws) -> str:
    return runner_security_group(aws)


@pytest.fixture
def settings(ami: str, security_group: str) -> Settings:
    return Settings(
        project="demo",
        region=REGION,
        instance_types=("g4dn.xlarge", "g5.xlarge"),
        security_group_ids=(security_group,),
        ami_parameter=AMI_PARAMETER,
        max_runtime_minutes=60,
        idle_timeout_minutes=10,
        ssm_prefix="/gpu-runner/demo",
        bucket="demo-bucket",
        wait_timeout_seconds=5,
        reap_grace_minutes=20,
    )


@pytest.fixture
def ctx() -> RunContext:
    return RunContext(
        repository=DEFAULT_REPOSITORY,
        run_id="777",
        run_attempt="1",
        branch="train/demo",
        commit="c0ffee" * 6 + "c0ff",
        workflow_ref=f"{DEFAULT_REPOSITORY}/.github/workflows/train.yml@refs/heads/train/demo",
        event_name="push",
    )


@pytest.fixture
def cli_env(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    github_double: GitHubDouble,
    ami: str,
    security_group: str,
) -> Path:
    """A settings file and the environment train.yml gives `gpu-runner` (repository, run, ref, API, token)."""
    settings = tmp_path / "gpu-runner.yaml"
    settings.write_text(
        yaml.safe_dump(
            {
                "project": "demo",
                "region": REGION,
                "instance_types": ["g4dn.xlarge"],
                "ami_parameter": AMI_PARAMETER,
                "ssm_prefix": "/gpu-runner/demo",
                "bucket": "demo-bucket",
                "wait_timeout_seconds": 5,
                "security_group_ids": [security_group],
            }
        )
    )
    for key, value in {
        "GITHUB_REPOSITORY": DEFAULT_REPOSITORY, "GITHUB_RUN_ID": "4321", "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_REF_NAME": "train/$(touch pwned)", "GITHUB_SHA": "f" * 40, "GITHUB_API_URL": github_double.url,
        "GITHUB_WORKFLOW_REF": f"{DEFAULT_REPOSITORY}/.github/workflows/train.yml@refs/heads/train/x",
        "GITHUB_EVENT_NAME": "push",
        "GPU_RUNNER_TOKEN": DEFAULT_TOKEN, "GITHUB_OUTPUT": str(tmp_path / "out"),
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    return settings


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """`logged()`: the package's log lines so far, in order, as `gpu-runner` shows them (pytest's caplog, from
    INFO up; the GitHub client's INFO lines stay hidden, as in log_output.to_stdout). Until issue 14 the tests
    collected them with `log=lines.append`; every module now logs to its own logger."""
    caplog.set_level(logging.INFO, logger="gpu_runner")
    github = logging.getLogger("gpu_runner.core.github")
    level = github.level
    github.setLevel(logging.WARNING)
    yield lambda: [record.getMessage() for record in caplog.records if record.name.startswith("gpu_runner.")]
    github.setLevel(level)
