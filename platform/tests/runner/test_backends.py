"""Every GPU backend through the one interface (gpu_runner/backend.py), with the same story: launch, wait until the
GPU has the work, teardown (twice: the stop path may run again), and its cost read back from the provider's record;
and work torn down at once, as a cancelled run's stop job does, leaves nothing running.

The EC2 runner against the moto server and the GitHub double (its runner is set online where a booted instance's
runner would connect); AWS Batch on the batch host (gpu_runner_testing/batch_host.py: moto's Batch, each job a local process).
A new backend adds its case here and must pass the same tests (CONTRIBUTING.md, "Adding a backend")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpu_runner import cli
from gpu_runner.backend import GpuBackend, Handle, Work
from gpu_runner.batch import batch_jobs
from gpu_runner.batch.backend import BatchJobs
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import BACKENDS, Settings
from gpu_runner.ec2_runner import lifecycle
from gpu_runner.ec2_runner.backend import Ec2Runner
from gpu_runner_testing.aws_constants import REGION as EC2_REGION
from gpu_runner_testing.batch_world import PY
from gpu_runner_testing.batch_world import REGION as BATCH_REGION
from gpu_runner_testing.github_double import GitHubDouble
from gpu_runner_testing.live_instances import live

# Long enough for moto's Batch thread to walk SUBMITTED..RUNNING (0.5 s steps) and a process to start on 2 busy
# cores (test_batch_jobs.py's figure).
JOB_TIMEOUT = 120.0


@dataclass
class Case:
    """One backend as the tests drive it: `work` to launch, `ready` plays what the test world cannot (a booted
    instance's runner connecting), `running` lists what is still running or registered for the handle."""

    backend: GpuBackend
    work: Work
    ready: Callable[[Handle], None]
    running: Callable[[Handle], list[str]]
    minimum_billed_seconds: int
    timeout_seconds: float
    slow_work: Work = field(default_factory=Work)


def ec2_case(
    settings: Settings, aws: Aws, github: GitHubRunners, github_double: GitHubDouble, ctx: RunContext
) -> Case:
    def running(handle: Handle) -> list[str]:
        instances = [i["InstanceId"] for i in live(aws.client("ec2", handle.region), managed_only=True)]
        return instances + [f"runner {runner}" for runner in github_double.runners]

    def ready(handle: Handle) -> None:
        github_double.set_status(int(handle.ids["runner-id"]), "online")

    # EC2 bills at least 60 s (lifecycle.billed_seconds cites the per-second billing minimum).
    return Case(Ec2Runner(settings, aws, github, ctx), Work(), ready, running, lifecycle.MINIMUM_BILLED_SECONDS,
                timeout_seconds=settings.wait_timeout_seconds)  # fmt: skip


def batch_case(monkeypatch: pytest.MonkeyPatch, batch_world: str) -> Case:
    monkeypatch.setenv("AWS_ENDPOINT_URL", batch_world)
    aws = Aws(boto3.Session(region_name=BATCH_REGION))
    settings = Settings(project="demo", region=BATCH_REGION, instance_types=("g5.xlarge",), backend="batch")
    backend = BatchJobs(
        settings, aws, queue="gpu", definition="train", tags={"project": "demo"}, poll_seconds=0.2
    )

    def running(handle: Handle) -> list[str]:
        [job] = batch_jobs.describe(aws.client("batch", BATCH_REGION), [handle.ids["job-id"]])
        return [] if job["status"] in {"SUCCEEDED", "FAILED"} else [f"job {job['jobId']} {job['status']}"]

    work = Work(name="backend-story", command=(PY, "-c", "print('trained')"))
    slow = Work(name="backend-cancelled", command=(PY, "-c", "import time; time.sleep(600)"))
    # A Batch attempt is billed from its start to its stop as the ECS task ran (batch_cost.billed_seconds).
    return Case(backend, work, lambda _handle: None, running, 1, JOB_TIMEOUT, slow)


@pytest.fixture(params=["runner", "batch"])
def case(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    if request.param == "runner":
        names = ("settings", "aws", "github", "github_double", "ctx")
        yield ec2_case(*(request.getfixturevalue(name) for name in names))
    else:
        yield batch_case(monkeypatch, request.getfixturevalue("batch_world"))


def test_every_backend_the_settings_accept_has_an_implementation() -> None:
    assert {Ec2Runner.name, BatchJobs.name} == set(BACKENDS)


def test_a_backend_runs_work_from_launch_to_its_cost(case: Case) -> None:
    backend = case.backend
    assert isinstance(backend, GpuBackend)
    handle = backend.launch(case.work)
    assert handle.backend == backend.name and all(handle.ids.values()), handle
    case.ready(handle)

    assert backend.wait(handle, timeout_seconds=case.timeout_seconds) == 0
    assert backend.teardown(handle) == ()
    assert backend.teardown(handle) == ()  # the stop path may run twice
    assert case.running(handle) == []

    [cost] = backend.costs(handle)
    assert cost.billed_seconds >= case.minimum_billed_seconds
    assert cost.region == handle.region and cost.total_usd > 0


def test_work_torn_down_at_once_leaves_nothing_running(case: Case) -> None:
    """A cancelled run's stop job: teardown right after launch, before the GPU took the work."""
    handle = case.backend.launch(case.slow_work)
    assert case.backend.teardown(handle) == ()
    deadline = time.monotonic() + case.timeout_seconds
    while case.running(handle) and time.monotonic() < deadline:
        time.sleep(0.2)  # a Batch job ends once the host has stopped its process
    assert case.running(handle) == []


def test_each_backend_refuses_work_it_cannot_run(settings: Settings, github: Any, ctx: Any) -> None:
    """Named by field, before any call: a runner runs the workflow's job, not a command; a Batch queue chooses the
    market itself and needs a queue and definition."""
    aws = Aws(boto3.Session(region_name=EC2_REGION))
    with pytest.raises(RunnerError, match="the work is the workflow job on the runner"):
        Ec2Runner(settings, aws, github, ctx).launch(Work(command=("python", "train.py")))
    batch_settings = Settings(
        project="demo", region=EC2_REGION, instance_types=("g5.xlarge",), backend="batch"
    )
    with pytest.raises(RunnerError, match="leave use_spot unset"):
        BatchJobs(batch_settings, aws, queue="q", definition="d").launch(Work(name="x", use_spot=True))
    with pytest.raises(RunnerError, match="queue, definition: a Batch job needs both"):
        BatchJobs(batch_settings, aws).launch(Work(name="x"))
    assert aws._clients == {}  # nothing was asked of AWS


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--instance-id", "i-nothex"), ("--runner-id", "0"), ("--region", "eu-west-1; id")],
)
def test_wait_checks_the_handle_before_any_aws_call(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    """`gpu-runner wait` reads the GitHub credential from AWS first of all: every id of the handle (the start
    job's outputs) is checked before that. AWS is unreachable here, so a call made first would fail differently."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.delenv("GPU_RUNNER_TOKEN")  # as in a workflow: the credential is read from SSM
    handle = {"--region": EC2_REGION, "--instance-id": "i-0123456789abcdef0", "--runner-id": "7", flag: value}
    argv = ["--settings", str(cli_env), "wait", *(f"{key}={item}" for key, item in handle.items())]

    assert cli.main(argv) == 1
    assert f"error: {flag}: " in capsys.readouterr().err
