"""launch / wait / teardown against a moto server and the GitHub double: nothing may be left running or registered."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from aws_constants import AMI_PARAMETER, OTHER_REGION, REGION
from aws_faults import AwsFaults
from github_double import GitHubDouble, decode_jit_config

from gpu_runner import lifecycle, naming
from gpu_runner.aws import Aws
from gpu_runner.errors import (
    CapacityError,
    LaunchBlockedError,
    RegistrationTimeout,
    RunnerError,
    SettingsError,
)
from gpu_runner.github import GitHubRunners
from gpu_runner.settings import Settings


def live_instances(aws: Aws, region: str = REGION) -> list[dict]:
    reply = aws.client("ec2", region).describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    return [i for r in reply["Reservations"] for i in r["Instances"]]


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


def test_launch_registers_stores_and_launches(settings, ctx, aws, github, github_double, outputs) -> None:
    logs: list[str] = []
    outcome = lifecycle.launch(settings, ctx, aws, github, log=logs.append)

    assert outcome.runner_name == outcome.label == "gpu-runner-777-1"
    (jit_call,) = [c for c in github_double.calls if c.path.endswith("/generate-jitconfig")]
    assert jit_call.body["name"] == "gpu-runner-777-1"
    assert jit_call.body["labels"] == ["gpu-runner-777-1"]

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
    assert tags[naming.TAG_LABEL] == "gpu-runner-777-1"
    assert tags[naming.TAG_RUNNER_ID] == str(outcome.runner_id)
    assert tags[naming.TAG_EXPIRES_AT].endswith("Z")
    user_data = aws.client("ec2", REGION).describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )["UserData"]["Value"]
    script = base64.b64decode(user_data).decode()
    assert outcome.parameter in script
    assert secret not in script
    assert all(secret not in line for line in logs)

    assert outputs() == {
        "runner-id": str(outcome.runner_id),
        "runner-name": "gpu-runner-777-1",
        "label": "gpu-runner-777-1",
        "parameter": outcome.parameter,
        "instance-id": instance["InstanceId"],
        "region": REGION,
        "instance-type": "g4dn.xlarge",
        "market": "spot",
        "availability-zone": instance["Placement"]["AvailabilityZone"],
    }


@pytest.mark.parametrize(
    ("code", "error"),
    [("VcpuLimitExceeded", LaunchBlockedError), ("InsufficientInstanceCapacity", CapacityError)],
)
def test_failed_launch_removes_runner_and_parameter(
    settings, ctx, aws, faults: AwsFaults, github, github_double, outputs, code, error
) -> None:
    faults.fail("ec2", "RunInstances", code, times=-1)
    with pytest.raises(error):
        lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    assert [c.method for c in github_double.calls if "/actions/runners" in c.path] == ["POST", "DELETE"]
    assert_nothing_left(aws, github_double)
    assert "instance-id" not in outputs()  # the stop job has nothing to terminate


def test_cancellation_right_after_run_instances_terminates_the_instance(
    settings, ctx, aws, github, github_double, outputs
) -> None:
    def log(line: str) -> None:
        if line.startswith("launched "):
            raise SystemExit(143)  # what SIGTERM from a cancelled workflow turns into

    with pytest.raises(SystemExit):
        lifecycle.launch(settings, ctx, aws, github, log=log)
    assert_nothing_left(aws, github_double)


def test_bad_ami_parameter_fails_before_anything_exists(settings, ctx, aws, github, github_double) -> None:
    broken = dataclasses.replace(settings, ami_parameter="/missing/ami")
    with pytest.raises(RunnerError, match="ami_parameter '/missing/ami' does not exist"):
        lifecycle.launch(broken, ctx, aws, github, log=lambda _: None)
    assert github_double.calls == []


def in_other_region(settings: Settings, aws: Aws, **changes: object) -> Settings:
    """The settings moved to OTHER_REGION (eu-west-1, the template's default region), with its own AMI."""
    other_ami = aws.client("ec2", OTHER_REGION).describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    aws.client("ssm", OTHER_REGION).put_parameter(
        Name=AMI_PARAMETER, Value=other_ami, Type="String", Overwrite=True
    )
    return dataclasses.replace(settings, region=OTHER_REGION, **changes)


def test_launch_skips_a_type_not_offered_in_the_region(settings, ctx, aws, github, github_double) -> None:
    """g6.xlarge is not offered in eu-west-1 (moto answers from AWS's published offerings): it is skipped with one
    line, never tried and never reported as "no capacity"."""
    eu = in_other_region(settings, aws, instance_types=("g6.xlarge", "g4dn.xlarge"))
    launches: list[str] = []
    # Clients created from here on (launch's own) report every RunInstances they send.
    aws.session.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: launches.append(params["InstanceType"])
    )
    logs: list[str] = []
    outcome = lifecycle.launch(eu, ctx, aws, github, log=logs.append)
    assert outcome.launched.instance_type == "g4dn.xlarge"
    assert launches == ["g4dn.xlarge"]
    skipped = [line for line in logs if "g6.xlarge" in line]
    assert len(skipped) == 1 and "not offer" in skipped[0] and OTHER_REGION in skipped[0], logs
    assert not [line for line in logs if "no capacity" in line]
    lifecycle.teardown(aws, github, region=OTHER_REGION, instance_id=outcome.launched.instance_id,
                       runner_id=outcome.runner_id, parameter=outcome.parameter, log=lambda _: None)  # fmt: skip
    assert_nothing_left(aws, github_double, OTHER_REGION)


def test_launch_with_no_offered_type_fails_before_anything_exists(
    settings, ctx, aws, github, github_double
) -> None:
    eu = in_other_region(settings, aws, instance_types=("g6.xlarge", "g6e.xlarge"))
    with pytest.raises(SettingsError) as info:
        lifecycle.launch(eu, ctx, aws, github, log=lambda _: None)
    message = str(info.value)
    assert "instance_types in configs/gpu-runner.yaml" in message
    assert "g6.xlarge, g6e.xlarge is offered in eu-west-1" in message
    assert "g4dn.xlarge" in message and "g5.xlarge" in message  # what the region does offer
    assert github_double.calls == []  # no runner registered
    assert live_instances(aws, OTHER_REGION) == []


def test_launch_skips_a_subnet_whose_zone_does_not_offer_the_type(
    settings, ctx, aws, github, github_double
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
    logs: list[str] = []
    outcome = lifecycle.launch(placed, ctx, aws, github, log=logs.append)
    assert (outcome.launched.subnet_id, outcome.launched.availability_zone) == (zone_a, f"{REGION}a")
    assert [line for line in logs if "g4dn.xlarge in us-east-1e" in line]
    lifecycle.teardown(aws, github, region=REGION, instance_id=outcome.launched.instance_id,
                       runner_id=outcome.runner_id, parameter=outcome.parameter, log=lambda _: None)  # fmt: skip


def test_wait_returns_when_online(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    github_double.online_after(outcome.runner_id, polls=2)
    logs: list[str] = []
    runner = lifecycle.wait(
        settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
        runner_id=outcome.runner_id, log=logs.append,
    )  # fmt: skip
    assert runner.status == "online"
    assert any("online after" in line for line in logs)


def test_wait_timeout_prints_the_console_output(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    logs: list[str] = []
    with pytest.raises(RegistrationTimeout):
        lifecycle.wait(
            settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
            runner_id=outcome.runner_id, timeout_seconds=0.5, log=logs.append,
        )  # fmt: skip
    start = logs.index(f"--- console output of {outcome.launched.instance_id} ---")
    assert logs[start + 2] == "--- end of console output ---"
    assert logs[start + 1].strip()


def test_wait_fails_fast_when_the_instance_dies(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    aws.client("ec2", REGION).terminate_instances(InstanceIds=[outcome.launched.instance_id])
    with pytest.raises(RunnerError, match="before its runner came online"):
        lifecycle.wait(
            settings, aws, github, region=REGION, instance_id=outcome.launched.instance_id,
            runner_id=outcome.runner_id, timeout_seconds=60, log=lambda _: None,
        )  # fmt: skip


def teardown_all(
    aws: Aws, github: GitHubRunners, outcome: lifecycle.LaunchOutcome, **kw
) -> lifecycle.TeardownReport:
    return lifecycle.teardown(
        aws, github, region=outcome.region, instance_id=outcome.launched.instance_id,
        runner_id=outcome.runner_id, parameter=outcome.parameter, log=lambda _: None, **kw,
    )  # fmt: skip


def test_teardown_twice_succeeds(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    first = teardown_all(aws, github, outcome)
    assert (first.runner, first.parameter) == ("deleted", "deleted")
    assert first.instance in {"shutting-down", "terminated"}
    assert first.billed_seconds is not None and first.billed_seconds >= 60
    second = teardown_all(aws, github, outcome)
    assert (second.runner, second.parameter) == ("already gone", "already gone")
    assert_nothing_left(aws, github_double)


def test_busy_runner_is_deleted_once_its_job_ends(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    github_double.stay_busy_for(outcome.runner_id, delete_attempts=2)
    report = teardown_all(aws, github, outcome)
    assert report.runner == "deleted"
    deletes = [c.status for c in github_double.calls if c.method == "DELETE"]
    assert deletes == [422, 422, 204]
    assert_nothing_left(aws, github_double)


def test_github_outage_still_terminates_the_instance(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    github_double.fail("DELETE", r"/actions/runners/\d+$", 503, times=1000)
    with pytest.raises(RunnerError, match="teardown incomplete"):
        teardown_all(aws, github, outcome)
    assert live_instances(aws) == []
    assert parameter_names(aws) == []
    assert list(github_double.runners) == [outcome.runner_id]  # the reaper's job now


def test_github_5xx_during_teardown_is_retried(settings, ctx, aws, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    github_double.fail("DELETE", r"/actions/runners/\d+$", 502, times=2)
    assert teardown_all(aws, github, outcome).runner == "deleted"
    assert_nothing_left(aws, github_double)


def test_aws_throttling_during_teardown_is_retried(settings, ctx, aws, faults, github, github_double) -> None:
    outcome = lifecycle.launch(settings, ctx, aws, github, log=lambda _: None)
    faults.fail("ec2", "TerminateInstances", "RequestLimitExceeded", times=2, status=503)
    faults.fail("ssm", "DeleteParameter", "ThrottlingException", times=2, status=400)
    report = teardown_all(aws, github, outcome)
    assert report.parameter == "deleted"
    assert [op for _, op, _, _ in faults.injected] == ["TerminateInstances"] * 2 + ["DeleteParameter"] * 2
    assert_nothing_left(aws, github_double)


def test_instance_in_a_second_region_is_terminated_there(settings, ctx, aws, github, github_double) -> None:
    other_ami = aws.client("ec2", OTHER_REGION).describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    aws.client("ssm", OTHER_REGION).put_parameter(
        Name=AMI_PARAMETER, Value=other_ami, Type="String", Overwrite=True
    )
    elsewhere = dataclasses.replace(settings, region=OTHER_REGION)
    outcome = lifecycle.launch(elsewhere, ctx, aws, github, log=lambda _: None)
    assert outcome.region == OTHER_REGION and live_instances(aws, OTHER_REGION)
    teardown_all(aws, github, outcome)
    assert live_instances(aws, OTHER_REGION) == []
    assert parameter_names(aws, OTHER_REGION) == []


def test_teardown_with_nothing_given_is_a_no_op(aws, github) -> None:
    report = lifecycle.teardown(aws, github, region=REGION, log=lambda _: None)
    assert report == lifecycle.TeardownReport("not given", "not given", "not given", None)


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
