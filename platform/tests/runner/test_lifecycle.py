"""launch / wait / teardown against a moto server and the GitHub double: nothing may be left running or registered."""

from __future__ import annotations

import base64
import dataclasses
import logging
import re
from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from gpu_runner.core import naming
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import (
    CapacityError,
    LaunchBlockedError,
    RegistrationTimeout,
    RunnerError,
    SettingsError,
)
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.settings import Settings
from gpu_runner.core.workflow_contract import LaunchOutput, WaitOutput
from gpu_runner.ec2_runner import lifecycle
from gpu_runner.ec2_runner.ownership import RunScope
from gpu_runner_testing.amazon_images import first_amazon_image
from gpu_runner_testing.aws_constants import AMI_PARAMETER, OTHER_REGION, REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import GitHubDouble, decode_jit_config
from gpu_runner_testing.live_instances import live
from gpu_runner_testing.security_groups import runner_security_group


def live_instances(aws: Aws, region: str = REGION) -> list[dict]:
    return live(aws.client("ec2", region), managed_only=True)


def parameter_names(aws: Aws, region: str = REGION) -> list[str]:
    params = aws.client("ssm", region).describe_parameters()["Parameters"]
    return [p["Name"] for p in params if p["Name"] != AMI_PARAMETER and not p["Name"].startswith("/aws/")]


def assert_nothing_left(aws: Aws, github_double: GitHubDouble, region: str = REGION) -> None:
    assert live_instances(aws, region) == []
    assert github_double.runners == {}
    assert parameter_names(aws, region) == []


@pytest.fixture
def outputs(tmp_path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(path))

    def read() -> dict[str, str]:
        return dict(line.split("=", 1) for line in path.read_text().splitlines()) if path.exists() else {}

    return read


def test_launch_registers_stores_and_launches(
    settings, ctx, aws, github, github_double, outputs, capsys, logged
) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    logs = logged()

    assert outcome.runner_name == "gpu-runner-777-1"
    # The label: the run key plus 64 random bits, so it cannot be derived from the public run id.
    assert re.fullmatch(r"gpu-runner-777-1-[0-9a-f]{16}", outcome.label), outcome.label
    (jit_call,) = [c for c in github_double.calls if c.path.endswith("/generate-jitconfig")]
    assert jit_call.body["name"] == "gpu-runner-777-1"
    assert jit_call.body["labels"] == [outcome.label]

    parameter = aws.client("ssm", REGION).get_parameter(Name=outcome.parameter, WithDecryption=True)[
        "Parameter"
    ]
    assert parameter["Type"] == "SecureString"
    assert outcome.parameter == "/gpu-runner/demo/777-1/jitconfig"
    secret = parameter["Value"]
    assert decode_jit_config(secret)  # the real encoded config the double issued

    (instance,) = live_instances(aws)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags[naming.MANAGED_BY_KEY] == "gpu-runner"
    assert tags[naming.TAG_RUN_ID] == "777" and tags[naming.TAG_RUN_ATTEMPT] == "1"
    assert tags[naming.TAG_BRANCH] == "train/demo"
    # The label is printed nowhere and stored nowhere in AWS: only the start job's outputs carry it.
    assert naming.TAG_LABEL not in tags
    assert all(outcome.label not in value for value in tags.values())
    assert tags[naming.TAG_RUNNER_ID] == str(outcome.runner_id)
    assert tags[naming.TAG_EXPIRES_AT].endswith("Z")
    user_data = aws.client("ec2", REGION).describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )["UserData"]["Value"]
    script = base64.b64decode(user_data).decode()
    assert outcome.parameter in script
    assert secret not in script
    assert outcome.label not in script
    assert all(secret not in line and outcome.label not in line for line in logs)
    # Nor in what it prints (the start job's log: write_outputs echoes outputs): the e2e hijack story found it.
    printed = capsys.readouterr().out
    assert outcome.label not in printed and outcome.parameter not in printed
    assert "label=(set, not printed)" in printed

    assert outputs() == {
        LaunchOutput.RUNNER_ID: str(outcome.runner_id),
        LaunchOutput.RUNNER_NAME: "gpu-runner-777-1",
        LaunchOutput.LABEL: outcome.label,
        LaunchOutput.PARAMETER: outcome.parameter,
        LaunchOutput.INSTANCE_ID: instance["InstanceId"],
        LaunchOutput.REGION: REGION,
        LaunchOutput.INSTANCE_TYPE: "g4dn.xlarge",
        LaunchOutput.MARKET: "spot",
        LaunchOutput.AVAILABILITY_ZONE: instance["Placement"]["AvailabilityZone"],
        LaunchOutput.BUCKET: settings.bucket,
    }


def test_the_jit_config_is_written_after_the_launch_for_that_instance_alone(
    settings, ctx, aws, github, github_double
) -> None:
    """Issue 13 item 4: the parameter is created after RunInstances, in one request carrying the new instance's
    ARN (the runner policy lets only that instance's role read or delete it) and the stack's own KMS key."""
    calls: list[tuple[str, dict]] = []
    for client in (aws.client("ssm", REGION), aws.single_attempt_client("ec2", REGION)):
        client.meta.events.register(
            "provide-client-params", lambda params, model, **_: calls.append((model.name, dict(params)))
        )
    outcome = lifecycle.launch(settings, ctx, aws, github)
    operations = [name for name, _ in calls]
    assert operations.index("RunInstances") < operations.index("PutParameter"), operations
    (put,) = [params for name, params in calls if name == "PutParameter"]
    assert (
        put["KeyId"] == "alias/gpu-runner/demo/jit-config" == naming.jit_config_key_alias("/gpu-runner/demo")
    )
    ssm = aws.client("ssm", REGION)
    listed = ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=outcome.parameter)["TagList"]
    tags = {t["Key"]: t["Value"] for t in listed}
    (instance,) = live_instances(aws)
    assert (
        tags[naming.TAG_INSTANCE_ARN]
        == f"arn:aws:ec2:{REGION}:123456789012:instance/{instance['InstanceId']}"
    )
    assert (
        tags[naming.TAG_INSTANCE_ARN]
        == f"arn:aws:ec2:{REGION}:123456789012:instance/{outcome.launched.instance_id}"
    )


@pytest.mark.parametrize("code", ["AccessDeniedException", "InvalidKeyId"])
def test_a_jit_config_refused_after_the_launch_leaves_no_instance_runner_or_parameter(
    settings, ctx, aws, faults: AwsFaults, github, github_double, outputs, code
) -> None:
    """The parameter (and its instance tag) is written once the instance exists: when that write fails (the
    key missing or not usable, tagging refused), launch terminates the instance it just started."""
    faults.fail("ssm", "PutParameter", code, times=-1)
    with pytest.raises(ClientError) as refused:
        lifecycle.launch(settings, ctx, aws, github)
    assert refused.value.response["Error"]["Code"] == code
    assert_nothing_left(aws, github_double)
    instance_id = outputs()[LaunchOutput.INSTANCE_ID]  # the stop job could clean up too
    (terminated,) = [
        i
        for r in aws.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])["Reservations"]
        for i in r["Instances"]
    ]
    assert terminated["State"]["Name"] in {"shutting-down", "terminated"}


@pytest.mark.parametrize(
    ("code", "error"),
    [("VcpuLimitExceeded", LaunchBlockedError), ("InsufficientInstanceCapacity", CapacityError)],
)
def test_failed_launch_removes_runner_and_parameter(
    settings, ctx, aws, faults: AwsFaults, github, github_double, outputs, code, error
) -> None:
    faults.fail("ec2", "RunInstances", code, times=-1)
    with pytest.raises(error):
        lifecycle.launch(settings, ctx, aws, github)
    assert [c.method for c in github_double.calls if "/actions/runners" in c.path] == ["POST", "DELETE"]
    assert_nothing_left(aws, github_double)
    assert LaunchOutput.INSTANCE_ID not in outputs()  # the stop job has nothing to terminate


def test_cancellation_right_after_run_instances_terminates_the_instance(
    settings, ctx, aws, github, github_double, outputs, logged
) -> None:
    class CancelAtLaunched(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("launched "):
                raise SystemExit(143)  # what SIGTERM from a cancelled workflow turns into

    handler = CancelAtLaunched()
    lifecycle.log.addHandler(handler)
    try:
        with pytest.raises(SystemExit):
            lifecycle.launch(settings, ctx, aws, github)
    finally:
        lifecycle.log.removeHandler(handler)
    assert_nothing_left(aws, github_double)


def test_bad_ami_parameter_fails_before_anything_exists(settings, ctx, aws, github, github_double) -> None:
    broken = dataclasses.replace(settings, ami_parameter="/missing/ami")
    with pytest.raises(RunnerError, match="ami_parameter '/missing/ami' does not exist"):
        lifecycle.launch(broken, ctx, aws, github)
    assert github_double.calls == []


def in_other_region(settings: Settings, aws: Aws, **changes: object) -> Settings:
    """The settings moved to OTHER_REGION (eu-west-1, the template's default region), with its own AMI."""
    other_ami = first_amazon_image(aws.client("ec2", OTHER_REGION))
    aws.client("ssm", OTHER_REGION).put_parameter(
        Name=AMI_PARAMETER, Value=other_ami, Type="String", Overwrite=True
    )
    groups = (runner_security_group(aws, OTHER_REGION),)
    return dataclasses.replace(settings, region=OTHER_REGION, **{"security_group_ids": groups, **changes})


@pytest.mark.slow
def test_launch_skips_a_type_not_offered_in_the_region(
    settings, ctx, aws, github, github_double, logged
) -> None:
    """g6.xlarge is not offered in eu-west-1 (moto answers from AWS's published offerings): it is skipped with one
    line, never tried and never reported as "no capacity"."""
    eu = in_other_region(settings, aws, instance_types=("g6.xlarge", "g4dn.xlarge"))
    launches: list[str] = []
    # Clients created from here on (launch's own) report every RunInstances they send.
    aws.session.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: launches.append(params["InstanceType"])
    )
    outcome = lifecycle.launch(eu, ctx, aws, github)
    logs = logged()
    assert outcome.launched.instance_type == "g4dn.xlarge"
    assert launches == ["g4dn.xlarge"]
    skipped = [line for line in logs if "g6.xlarge" in line]
    assert len(skipped) == 1 and "not offer" in skipped[0] and OTHER_REGION in skipped[0], logs
    assert not [line for line in logs if "no capacity" in line]
    teardown_all(aws, github, outcome, ctx)
    assert_nothing_left(aws, github_double, OTHER_REGION)


@pytest.mark.slow
def test_launch_with_no_offered_type_fails_before_anything_exists(
    settings, ctx, aws, github, github_double
) -> None:
    eu = in_other_region(settings, aws, instance_types=("g6.xlarge", "g6e.xlarge"))
    with pytest.raises(SettingsError) as info:
        lifecycle.launch(eu, ctx, aws, github)
    message = str(info.value)
    assert "instance_types in configs/gpu-runner.yaml" in message
    assert "g6.xlarge, g6e.xlarge is offered in eu-west-1" in message
    assert "g4dn.xlarge" in message and "g5.xlarge" in message  # what the region does offer
    assert github_double.calls == []  # no runner registered
    assert live_instances(aws, OTHER_REGION) == []


def test_launch_skips_a_subnet_whose_zone_does_not_offer_the_type(
    settings, ctx, aws, github, github_double, logged
) -> None:
    # us-east-1e offers no g4dn.xlarge (AWS's zone offerings as moto ships them); us-east-1a does.
    client = aws.client("ec2", REGION)
    vpc = client.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    zone_e, zone_a = (
        client.create_subnet(VpcId=vpc, CidrBlock=f"10.40.{n}.0/24", AvailabilityZone=f"{REGION}{z}")[
            "Subnet"
        ]["SubnetId"]
        for n, z in ((1, "e"), (2, "a"))
    )
    placed = dataclasses.replace(settings, instance_types=("g4dn.xlarge",), subnet_ids=(zone_e, zone_a))
    outcome = lifecycle.launch(placed, ctx, aws, github)
    logs = logged()
    assert (outcome.launched.subnet_id, outcome.launched.availability_zone) == (zone_a, f"{REGION}a")
    assert [line for line in logs if "g4dn.xlarge in us-east-1e" in line]
    teardown_all(aws, github, outcome, ctx)


def test_wait_returns_when_online(settings, ctx, aws, github, github_double, logged) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    github_double.online_after(outcome.runner_id, polls=2)
    sleeps: list[float] = []
    online = lifecycle.wait(
        settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
        runner_id=outcome.runner_id, sleep=sleeps.append,  # the two intervals pass at once
    )  # fmt: skip
    assert online.runner.status == "online"
    assert sleeps == [lifecycle.POLL_INTERVAL_SECONDS] * 2
    assert any("s after launch" in line for line in logged())


class FakeClock:
    """wait's clock and sleep: time passes only when wait sleeps. The runner connects at `online_at` seconds
    (the double is told at the first sleep that crosses it), so each poll's time is exact and no test waits."""

    def __init__(self, github_double: GitHubDouble, runner_id: int, online_at: float) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._connect = lambda: github_double.set_status(runner_id, "online")
        self.online_at = online_at
        if online_at <= 0:
            self._connect()

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        before, self.now = self.now, self.now + seconds
        self.sleeps.append(seconds)
        if before < self.online_at <= self.now:
            self._connect()


def runner_polls(github_double: GitHubDouble, runner_id: int) -> int:
    path = f"/runners/{runner_id}"
    return sum(1 for c in github_double.calls if c.method == "GET" and c.path.endswith(path))


# The two latest connections poll 20 and 44 times through moto: the slow tier (the first three show the rule).
@pytest.mark.parametrize(
    "online_at", [0.0, 0.5, 47.0, *(pytest.param(at, marks=pytest.mark.slow) for at in (59.9, 131.0))]
)
def test_wait_notices_online_within_one_poll_interval(
    settings, ctx, aws, github, github_double, outputs, online_at
) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    fake = FakeClock(github_double, outcome.runner_id, online_at)
    github_double.clear_calls()
    online = lifecycle.wait(
        settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
        runner_id=outcome.runner_id, timeout_seconds=600, sleep=fake.sleep, clock=fake.clock,
    )  # fmt: skip
    assert online.runner.status == "online"
    # Noticed at the first poll after it connected: never more than one interval late (the capped backoff
    # noticed it up to 15 s late: 136 s for a 120 s boot).
    assert 0 <= fake.now - online_at <= lifecycle.POLL_INTERVAL_SECONDS
    assert set(fake.sleeps) <= {lifecycle.POLL_INTERVAL_SECONDS}
    assert runner_polls(github_double, outcome.runner_id) == len(fake.sleeps) + 1
    assert int(outputs()[WaitOutput.RUNNER_ONLINE_SECONDS]) >= 0
    assert abs(int(outputs()[WaitOutput.RUNNER_ONLINE_AT]) - online.online_at.timestamp()) <= 1


@pytest.mark.slow
def test_wait_stays_within_githubs_rate_limit(settings, ctx, aws, github, github_double) -> None:
    """A runner that never comes online: one GitHub request per interval, for the whole wait_timeout."""
    outcome = lifecycle.launch(settings, ctx, aws, github)
    fake = FakeClock(github_double, outcome.runner_id, online_at=float("inf"))
    github_double.clear_calls()
    with pytest.raises(RegistrationTimeout, match="did not come online within 600 s"):
        lifecycle.wait(
            settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
            runner_id=outcome.runner_id, timeout_seconds=600, sleep=fake.sleep,
            clock=fake.clock,
        )  # fmt: skip
    polls = runner_polls(github_double, outcome.runner_id)
    assert polls == 600 / lifecycle.POLL_INTERVAL_SECONDS + 1 == 201
    # 5,000 requests per hour for a PAT or an App installation (docs.github.com, "Rate limits for the REST API").
    assert polls < 5000 / 20


def test_wait_timeout_prints_the_console_output(settings, ctx, aws, github, github_double, logged) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    with pytest.raises(RegistrationTimeout):
        lifecycle.wait(
            settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
            runner_id=outcome.runner_id, timeout_seconds=0.5,
        )  # fmt: skip
    logs = logged()
    start = logs.index(f"--- console output of {outcome.launched.instance_id} ---")
    assert logs[start + 2] == "--- end of console output ---"
    assert logs[start + 1].strip()


def test_wait_fails_fast_when_the_instance_dies(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    aws.client("ec2", REGION).terminate_instances(InstanceIds=[outcome.launched.instance_id])
    with pytest.raises(RunnerError, match="before its runner came online"):
        lifecycle.wait(
            settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
            runner_id=outcome.runner_id, timeout_seconds=60,
        )  # fmt: skip


def test_wait_says_the_runner_was_taken_when_another_job_holds_it(settings, ctx, aws, github, github_double):
    """Another workflow named the label while the instance booted: the runner is busy before this run's train job
    can even be queued (it needs this start job)."""
    outcome = lifecycle.launch(settings, ctx, aws, github)
    github_double.set_status(outcome.runner_id, "online", busy=True)
    with pytest.raises(
        RunnerError, match=r"^runner was taken: .*busy with a job while this start job still waits"
    ):
        lifecycle.wait(
            settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
            runner_id=outcome.runner_id, timeout_seconds=60,
        )  # fmt: skip


def test_wait_says_the_runner_was_taken_when_its_registration_went_with_the_instance(
    settings, ctx, aws, github, github_double
) -> None:
    """The refused job ended (GitHub removes a JIT runner after its one job) and the hook halted the instance."""
    outcome = lifecycle.launch(settings, ctx, aws, github)
    github_double.job_completed(outcome.runner_id)
    aws.client("ec2", REGION).terminate_instances(InstanceIds=[outcome.launched.instance_id])
    with pytest.raises(
        RunnerError, match=r"^runner was taken: .*registration is gone before this run used it"
    ):
        lifecycle.wait(
            settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
            runner_id=outcome.runner_id, timeout_seconds=60,
        )  # fmt: skip


def scope(ctx: naming.RunContext) -> RunScope:
    """The launching run's key (the `settings` fixture's project and prefix), as its stop job tears down under it;
    another run's: test_teardown_scope.py."""
    return RunScope(ctx, "demo", "/gpu-runner/demo")


def teardown_all(
    aws: Aws, github: GitHubRunners, outcome: lifecycle.LaunchOutcome, ctx: naming.RunContext, **kw
) -> lifecycle.TeardownReport:
    return lifecycle.teardown(
        aws, github, scope(ctx), region=outcome.region, instance_id=outcome.launched.instance_id,
        runner_id=outcome.runner_id, parameter=outcome.parameter, **kw,
    )  # fmt: skip


def test_teardown_twice_succeeds(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    first = teardown_all(aws, github, outcome, ctx)
    assert (first.runner, first.parameter) == ("deleted", "deleted")
    assert first.instance in {"shutting-down", "terminated"}
    assert first.billed_seconds is not None and first.billed_seconds >= 60
    second = teardown_all(aws, github, outcome, ctx)
    assert (second.runner, second.parameter) == ("already gone", "already gone")
    assert_nothing_left(aws, github_double)


class TeardownOrder:
    """Records, in order, the terminate calls (a botocore event) and the runner deletes (a wrapper), and the
    instance's state in moto when each delete starts: call order, not wall time."""

    def __init__(self, aws: Aws, github: GitHubRunners, monkeypatch, instance_id: str) -> None:
        self.calls: list[str] = []
        self.state_at_delete: list[str] = []
        events = aws.client("ec2", REGION).meta.events  # the client teardown uses (created by launch)
        events.register("before-call.ec2.TerminateInstances", lambda **_: self.calls.append("terminate"))
        delete = github.delete_runner

        def recording_delete(runner_id: int) -> bool:
            self.calls.append("delete-runner")
            reply = aws.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])
            self.state_at_delete.append(reply["Reservations"][0]["Instances"][0]["State"]["Name"])
            return delete(runner_id)

        monkeypatch.setattr(github, "delete_runner", recording_delete)


def test_busy_runner_is_deleted_once_its_job_ends(
    settings, ctx, aws, github, github_double, monkeypatch
) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    order = TeardownOrder(aws, github, monkeypatch, outcome.launched.instance_id)
    github_double.stay_busy_for(outcome.runner_id, delete_attempts=2)
    report = teardown_all(aws, github, outcome, ctx)
    assert report.runner == "deleted"
    deletes = [c.status for c in github_double.calls if c.method == "DELETE"]
    assert deletes == [422, 422, 204]
    assert order.calls == ["terminate", "delete-runner"]  # the bill ended before the busy retries began
    assert order.state_at_delete == ["terminated"]
    assert_nothing_left(aws, github_double)


def test_busy_runner_is_removed_after_its_instance_is_terminated(
    settings, ctx, aws, github, github_double, monkeypatch
) -> None:
    """A runner busy until busy_timeout_seconds: terminating first ends the job, so GitHub marks the runner
    offline and the delete goes through. Deleting first kept the GPU billing 271 s longer."""
    outcome = lifecycle.launch(settings, ctx, aws, github)
    order = TeardownOrder(aws, github, monkeypatch, outcome.launched.instance_id)
    # The job never ends while its machine runs.
    github_double.stay_busy_for(outcome.runner_id, delete_attempts=10_000)

    def machine_gone(**_: object) -> None:  # what GitHub does when the runner's machine disappears
        github_double.set_status(outcome.runner_id, "offline", busy=False)

    aws.client("ec2", REGION).meta.events.register("after-call.ec2.TerminateInstances", machine_gone)
    report = teardown_all(aws, github, outcome, ctx)
    assert order.calls == ["terminate", "delete-runner"]
    assert order.state_at_delete == ["terminated"]
    assert report.runner == "deleted"
    assert [c.status for c in github_double.calls if c.method == "DELETE"] == [204]
    assert_nothing_left(aws, github_double)


def test_github_outage_still_terminates_the_instance(
    settings, ctx, aws, github, github_double, monkeypatch
) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    order = TeardownOrder(aws, github, monkeypatch, outcome.launched.instance_id)
    # Every DELETE this teardown sends answers 503: the first try and GithubRetry's 3 retries.
    github_double.fail("DELETE", r"/actions/runners/\d+$", 503, times=4)
    with pytest.raises(RunnerError, match=f"teardown incomplete.*runner: .*{outcome.runner_id}"):
        teardown_all(aws, github, outcome, ctx)
    # Terminated before GitHub was asked at all: the outage costs no GPU time (it cost 13 s deleting first).
    assert order.calls[0] == "terminate"
    assert order.state_at_delete == ["terminated"]
    assert live_instances(aws) == []
    assert parameter_names(aws) == []
    assert list(github_double.runners) == [outcome.runner_id]  # reported above; the reaper's job now

    assert [c.status for c in github_double.calls if c.method == "DELETE"] == [503] * 4

    # GitHub is back: the stop job's re-run removes the registration, and everything else is already gone.
    again = teardown_all(aws, github, outcome, ctx)
    assert (again.runner, again.instance, again.parameter) == ("deleted", "already gone", "already gone")
    assert_nothing_left(aws, github_double)


def test_github_5xx_during_teardown_is_retried(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    github_double.fail("GET", r"/actions/runners$", 502, times=2)  # the look for this run's runners
    github_double.fail("DELETE", r"/actions/runners/\d+$", 502, times=2)
    assert teardown_all(aws, github, outcome, ctx).runner == "deleted"
    statuses = [(c.method, c.status) for c in github_double.calls if "/actions/runners" in c.path]
    retried = [("GET", 502), ("GET", 502), ("GET", 200), ("DELETE", 502), ("DELETE", 502), ("DELETE", 204)]
    assert statuses[-6:] == retried, statuses
    assert_nothing_left(aws, github_double)


@pytest.mark.slow
def test_aws_throttling_during_teardown_is_retried(settings, ctx, aws, faults, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    faults.fail("ec2", "TerminateInstances", "RequestLimitExceeded", times=2, status=503)
    faults.fail("ssm", "DeleteParameter", "ThrottlingException", times=2, status=400)
    report = teardown_all(aws, github, outcome, ctx)
    assert report.parameter == "deleted"
    assert [op for _, op, _, _ in faults.injected] == ["TerminateInstances"] * 2 + ["DeleteParameter"] * 2
    assert_nothing_left(aws, github_double)


@pytest.mark.slow
def test_instance_in_a_second_region_is_terminated_there(settings, ctx, aws, github, github_double) -> None:
    other_ami = first_amazon_image(aws.client("ec2", OTHER_REGION))
    aws.client("ssm", OTHER_REGION).put_parameter(
        Name=AMI_PARAMETER, Value=other_ami, Type="String", Overwrite=True
    )
    elsewhere = dataclasses.replace(
        settings, region=OTHER_REGION, security_group_ids=(runner_security_group(aws, OTHER_REGION),)
    )
    outcome = lifecycle.launch(elsewhere, ctx, aws, github)
    assert outcome.region == OTHER_REGION and live_instances(aws, OTHER_REGION)
    teardown_all(aws, github, outcome, ctx)
    assert live_instances(aws, OTHER_REGION) == []
    assert parameter_names(aws, OTHER_REGION) == []


def test_teardown_of_a_run_that_launched_nothing_ends_nothing(aws, github, ctx, github_double) -> None:
    """No ids and nothing of this run's: every step looks, finds nothing and says so (and the parameter delete of
    this attempt's name answers "already gone")."""
    report = lifecycle.teardown(aws, github, scope(ctx), region=REGION)
    assert report == lifecycle.TeardownReport("already gone", "none found", "already gone", None)
    assert [c.method for c in github_double.calls] == ["GET"]  # the runner list, no DELETE


def test_billed_seconds_has_a_60_second_minimum() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    running = {"LaunchTime": start, "State": {"Name": "running"}}
    assert lifecycle.billed_seconds(running, start + timedelta(seconds=5)) == 60
    assert lifecycle.billed_seconds(running, start + timedelta(seconds=125.2)) == 126
    ended = {
        "LaunchTime": start,
        "State": {"Name": "terminated"},
        "StateTransitionReason": "User initiated (2026-01-01 00:10:00 GMT)",
    }
    assert lifecycle.billed_seconds(ended, start + timedelta(hours=5)) == 600


def test_the_aws_double_states_termination_times_as_ec2_does(settings, ctx, aws, github) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github)
    client = aws.client("ec2", REGION)
    client.terminate_instances(InstanceIds=[outcome.launched.instance_id])
    (instance,) = client.describe_instances(InstanceIds=[outcome.launched.instance_id])["Reservations"][0][
        "Instances"
    ]
    # EC2: "User initiated (2018-06-26 07:19:42 GMT)"; moto itself writes "... UTC)".
    ec2_form = r"User initiated \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d GMT\)"
    assert re.fullmatch(ec2_form, instance["StateTransitionReason"])
    ended = lifecycle.transition_time(instance)
    assert ended is not None and abs((ended - instance["LaunchTime"]).total_seconds()) < 120


def test_teardown_bills_up_to_ec2s_termination_time(settings, ctx, aws, github) -> None:
    """With EC2's own termination time readable, `now` (the fallback) does not matter."""
    outcome = lifecycle.launch(settings, ctx, aws, github)
    far_later = datetime.now(UTC) + timedelta(hours=2)
    report = teardown_all(aws, github, outcome, ctx, now=far_later)
    assert report.billed_seconds == lifecycle.MINIMUM_BILLED_SECONDS  # launched and ended within a minute


@pytest.mark.parametrize(
    ("state", "reason", "billed"),
    [
        ("terminated", "User initiated (2026-01-01 00:10:00 GMT)", 600),  # EC2
        ("terminated", "User initiated (2026-01-01 00:10:00 UTC)", 600),  # moto
        # Right after TerminateInstances EC2 says shutting-down, already with the time of the request.
        ("shutting-down", "User initiated (2026-01-01 00:11:40 GMT)", 700),
    ],
)
def test_billed_seconds_reads_the_termination_time(state: str, reason: str, billed: int) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    instance = {"LaunchTime": start, "State": {"Name": state}, "StateTransitionReason": reason}
    assert lifecycle.billed_seconds(instance, start + timedelta(hours=5)) == billed


@pytest.mark.parametrize("reason", ["", "User initiated", "User initiated (01/01/2026 00:10)", None])
def test_unreadable_termination_time_bills_launch_to_now(reason, logged) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    instance = {"LaunchTime": start, "State": {"Name": "terminated"}, "StateTransitionReason": reason}
    assert lifecycle.billed_seconds(instance, start + timedelta(seconds=4321)) == 4321
    logs = logged()
    assert logs and "not readable" in logs[0]


def test_settings_reject_bad_values() -> None:
    with pytest.raises(RunnerError) as info:
        Settings(
            project="",
            region="moon",
            instance_types=("G4DN",),
            idle_timeout_minutes=30,
            max_runtime_minutes=20,
        )
    message = str(info.value)
    for fragment in (
        "project:",
        "region: 'moon'",
        "instance_types: 'G4DN'",
        "idle_timeout_minutes: must be shorter",
    ):
        assert fragment in message


def test_settings_reject_p3_on_the_default_ami() -> None:
    """The Deep Learning Base OSS Nvidia Driver AMI's release notes list no P3 among its supported instances."""
    with pytest.raises(SettingsError) as info:
        Settings(project="demo", region=REGION, instance_types=("g4dn.xlarge", "p3.2xlarge"))
    message = str(info.value)
    assert (
        "instance_types: 'p3.2xlarge' is a GPU family the Deep Learning Base OSS Nvidia Driver AMI" in message
    )
    assert "g4dn.xlarge" not in message.split("'p3.2xlarge'")[0]  # only the unsupported entry is named
    assert "set ami_id" in message
    # An own AMI may support it: then it is the user's call.
    assert Settings(
        project="demo", region=REGION, instance_types=("p3.2xlarge",), ami_id="ami-0123456789abcdef0"
    )
