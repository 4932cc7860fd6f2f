"""`gpu-runner capacity --wanted=N` (sweep.yml's plan job) against the moto server: the instances holding the G and
VT vCPU quotas are real moto instances; the quota values are answered through the botocore hook, because moto
5.2.5 serves no ec2 quota (gpu_runner_testing/service_quotas.py says how)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from gpu_runner import cli
from gpu_runner.core import quotas
from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import Settings
from gpu_runner.core.workflow_contract import CapacityOutput, workflow_command
from gpu_runner.ec2_runner import capacity
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.service_quotas import answer_quotas

ON_DEMAND, SPOT = quotas.ON_DEMAND_QUOTA[0], quotas.SPOT_QUOTA[0]


def command(code: str, desired: int) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
        f"--desired-value {desired} --region {REGION}"
    )


def run_instance(aws: Aws, ami: str, instance_type: str, *, spot: bool = False) -> str:
    market = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    reply = aws.client("ec2", REGION).run_instances(
        ImageId=ami, InstanceType=instance_type, MinCount=1, MaxCount=1, **market
    )
    return reply["Instances"][0]["InstanceId"]


@pytest.fixture
def on_demand_only(settings: Settings) -> Settings:
    return dataclasses.replace(settings, use_spot=False)


@pytest.fixture
def requests(aws: Aws) -> list[str]:
    """Every AWS operation sent through `aws` from now on."""
    sent: list[str] = []
    aws.session.events.register("before-call", lambda model, **_: sent.append(model.name))
    return sent


@pytest.mark.parametrize(
    ("quota", "runners"), [(4, 1), (8, 2), (7, 1), (0, 0), (100, 2)]
)  # fmt: skip
def test_runners_are_the_free_vcpus_over_the_largest_types(
    on_demand_only: Settings, aws: Aws, faults: AwsFaults, quota: int, runners: int
) -> None:
    answer_quotas(faults, on_demand=quota, spot=0)
    found = capacity.capacity(on_demand_only, aws, wanted=2)
    assert (found.runners, found.vcpus_per_runner, found.quota_vcpus, found.in_use_vcpus) == (
        runners,
        4,
        quota,
        0,
    )
    assert [pool.code for pool in found.pools] == [ON_DEMAND]  # no spot: its quota is not read


def test_one_of_two_warns_with_the_quota_and_the_increase_command(
    on_demand_only: Settings, aws: Aws, faults: AwsFaults, capsys, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "out"))
    answer_quotas(faults, on_demand=4, spot=0)
    assert capacity.report(on_demand_only, capacity.capacity(on_demand_only, aws, wanted=2)) == 0
    (warning,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::")]
    assert warning == (
        "::warning title=GPU vCPU quota::the vCPU quota allows 1 of 2 GPU runners in us-east-1 now: each needs 4 "
        "vCPUs (g4dn.xlarge, the largest of instance_types); L-DB2E81BA 'Running On-Demand G and VT instances' is "
        f"4 vCPUs, 0 in use. To run 2 at once: {command(ON_DEMAND, 8)}"
    )
    assert (tmp_path / "out").read_text().splitlines() == [
        "runners=1", "vcpus-per-runner=4", "quota-vcpus=4", "in-use-vcpus=0",
    ]  # fmt: skip


def test_two_of_two_says_nothing_more(on_demand_only: Settings, aws: Aws, faults: AwsFaults, capsys) -> None:
    answer_quotas(faults, on_demand=8, spot=0)
    assert capacity.report(on_demand_only, capacity.capacity(on_demand_only, aws, wanted=2)) == 0
    out = capsys.readouterr().out
    assert "::" not in out and "runners=2" in out


def test_none_of_two_is_an_error_and_launches_nothing(
    on_demand_only: Settings, aws: Aws, faults: AwsFaults, capsys, requests: list[str]
) -> None:
    answer_quotas(faults, on_demand=0, spot=0)
    assert capacity.report(on_demand_only, capacity.capacity(on_demand_only, aws, wanted=2)) == 1
    out = capsys.readouterr().out
    (error,) = [line for line in out.splitlines() if line.startswith("::")]
    assert error.startswith("::error title=GPU vCPU quota::the vCPU quota allows 0 of 2 GPU runners")
    assert error.endswith(f"{command(ON_DEMAND, 8)}; nothing is launched")
    assert "runners=0" in out
    # Read-only: describes and gets, nothing created.
    assert requests and all(name.startswith(("Describe", "Get")) for name in requests), requests


def test_running_g_instances_use_the_quota_of_their_market(
    settings: Settings, on_demand_only: Settings, aws: Aws, ami: str, faults: AwsFaults
) -> None:
    """One on-demand and one spot g4dn.xlarge run (4 vCPUs each); a t3.micro (another family's quota) and a stopped
    g5.xlarge (holds no quota) are not counted."""
    run_instance(aws, ami, "g4dn.xlarge")
    run_instance(aws, ami, "g4dn.xlarge", spot=True)
    run_instance(aws, ami, "t3.micro")
    stopped = run_instance(aws, ami, "g5.xlarge")
    aws.client("ec2", REGION).stop_instances(InstanceIds=[stopped])
    answer_quotas(faults, on_demand=12, spot=4)

    found = capacity.capacity(on_demand_only, aws, wanted=3)
    assert (found.runners, found.in_use_vcpus, found.quota_vcpus) == (2, 4, 12)
    assert capacity.shortfall(found, REGION).endswith(command(ON_DEMAND, 16))

    # With spot: its quota is full (the spot instance), so spot adds none; launch's pool, spot, is the one to raise.
    found = capacity.capacity(settings, aws, wanted=3)
    assert [(p.code, p.quota_vcpus, p.in_use_vcpus) for p in found.pools] == [
        (SPOT, 4, 4),
        (ON_DEMAND, 12, 4),
    ]
    assert (found.runners, found.in_use_vcpus, found.quota_vcpus) == (2, 8, 16)
    assert capacity.shortfall(found, REGION).endswith(command(SPOT, 8))


def test_with_spot_a_runner_fits_in_either_pool(settings: Settings, aws: Aws, faults: AwsFaults) -> None:
    answer_quotas(faults, on_demand=4, spot=4)
    assert capacity.capacity(settings, aws, wanted=2).runners == 2


def test_the_largest_configured_type_sets_the_vcpus_per_runner(
    on_demand_only: Settings, aws: Aws, faults: AwsFaults
) -> None:
    answer_quotas(faults, on_demand=8, spot=0)
    larger = dataclasses.replace(on_demand_only, instance_types=("g4dn.xlarge", "g5.2xlarge"))
    found = capacity.capacity(larger, aws, wanted=2)
    assert (found.runners, found.vcpus_per_runner, found.largest_type) == (1, 8, "g5.2xlarge")


def test_no_g_or_vt_type_is_not_checked(
    on_demand_only: Settings, aws: Aws, capsys, requests: list[str]
) -> None:
    others = dataclasses.replace(on_demand_only, instance_types=("p4d.24xlarge",))
    found = capacity.capacity(others, aws, wanted=2)
    assert found.runners == 2 and requests == []
    assert capacity.report(others, found) == 0
    assert (
        "::warning title=GPU vCPU quota::no G or VT type in instance_types (p4d.24xlarge)"
        in capsys.readouterr().out
    )


def test_a_workflow_command_cannot_be_ended_or_forged_by_its_text() -> None:
    line = workflow_command("warning", "a:b,c", "x 100%\n::error::forged\r")
    assert line == "::warning title=a%3Ab%2Cc::x 100%25%0A::error::forged%0D"
    assert "\n" not in line


# ------------------------------------------------------------------------------------------ the CLI
@pytest.fixture
def cli_aws(monkeypatch: pytest.MonkeyPatch, aws: Aws) -> Aws:
    monkeypatch.setattr(cli, "Aws", lambda: aws)  # the faults and the recorder live on this session
    return aws


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "x", "", " 2", "٣", "--x"])
def test_a_bad_wanted_is_refused_naming_the_flag_before_any_call(
    cli_env: Path, cli_aws: Aws, requests: list[str], capsys, bad: str
) -> None:
    assert cli.main(["--settings", str(cli_env), "capacity", f"--wanted={bad}"]) == 1
    assert "error: --wanted: " in capsys.readouterr().err
    assert requests == []


def test_the_cli_writes_the_outputs(cli_env: Path, cli_aws: Aws, faults: AwsFaults, capsys) -> None:
    cli_env.write_text(yaml.safe_dump({**yaml.safe_load(cli_env.read_text()), "use_spot": False}))
    out = cli_env.parent / "out"
    answer_quotas(faults, on_demand=4, spot=0)
    assert cli.main(["--settings", str(cli_env), "capacity", "--wanted=2"]) == 0
    assert dict(line.split("=", 1) for line in out.read_text().splitlines()) == {
        CapacityOutput.RUNNERS: "1", CapacityOutput.VCPUS_PER_RUNNER: "4", CapacityOutput.QUOTA_VCPUS: "4",
        CapacityOutput.IN_USE_VCPUS: "0",
    }  # fmt: skip
    assert "::warning title=GPU vCPU quota::the vCPU quota allows 1 of 2" in capsys.readouterr().out


def test_the_cli_fails_when_no_runner_fits_and_needs_no_github(
    cli_env: Path, cli_aws: Aws, faults: AwsFaults, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(
        "GITHUB_REPOSITORY"
    )  # it asks nothing of GitHub: it answers by hand, from a laptop, too
    answer_quotas(faults, on_demand=0, spot=0)
    assert cli.main(["--settings", str(cli_env), "capacity", "--wanted=2"]) == 1
    out = capsys.readouterr().out
    assert "::error title=GPU vCPU quota::the vCPU quota allows 0 of 2" in out and "runners=0" in out
