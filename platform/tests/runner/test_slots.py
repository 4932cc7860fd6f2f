"""Slots (issue 15): one workflow run of sweep.yml starts a runner per trial. Each slot gets its own runner name,
JIT-config parameter and instance (moto server, GitHub double), tears down alone, and is paired and reaped by the
reaper on its own; a malformed slot is refused before any API call; no slot means exactly today's names."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest

from gpu_runner import cli
from gpu_runner.core import naming
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import lifecycle, reaper
from gpu_runner.ec2_runner.ownership import RunScope
from gpu_runner_testing.aws_constants import AMI_PARAMETER, REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import RUNNER_NAME_MAX, GitHubDouble
from gpu_runner_testing.live_instances import live
from gpu_runner_testing.price_answers import get_products_answer, price_list_product

# Not trial numbers: letters, a sign, a leading zero, 7 digits, an Arabic-Indic 3 (str.isdigit() accepts it),
# whitespace, an exponent, a value that would be an option.
BAD_SLOTS = ["x", "-1", "+1", "007", "1234567", "٣", "1 ", "1e3", "--x", "1/2"]


def live_instances(aws: Aws) -> list[dict]:
    return live(aws.client("ec2", REGION), managed_only=True)


def parameter_names(aws: Aws) -> set[str]:
    params = aws.client("ssm", REGION).describe_parameters()["Parameters"]
    return {p["Name"] for p in params if p["Name"] != AMI_PARAMETER and not p["Name"].startswith("/aws/")}


def tags_of(instance: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance["Tags"]}


def state(aws: Aws, instance_id: str) -> str:
    reply = aws.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])
    return reply["Reservations"][0]["Instances"][0]["State"]["Name"]


def launch_slots(settings, ctx: RunContext, aws: Aws, github: GitHubRunners) -> list[lifecycle.LaunchOutcome]:
    return [
        lifecycle.launch(settings, dataclasses.replace(ctx, slot=slot), aws, github) for slot in ("0", "1")
    ]


def test_no_slot_keeps_todays_names_and_tags(ctx: RunContext) -> None:
    assert naming.run_key(ctx) == "777-1"
    assert naming.runner_name(ctx) == "gpu-runner-777-1"
    assert naming.parameter_name("/p", ctx) == "/p/777-1/jitconfig"
    settings = Settings(project="demo", region=REGION, instance_types=("g4dn.xlarge",))
    tags = lifecycle.instance_tags(settings, ctx, runner_id=1, expires_at=datetime.now(UTC))
    assert naming.TAG_SLOT not in tags
    assert naming.TAG_SLOT in lifecycle.instance_tags(
        settings, dataclasses.replace(ctx, slot="0"), runner_id=1, expires_at=datetime.now(UTC)
    )
    slotted = dataclasses.replace(ctx, slot="12")
    assert naming.runner_name(slotted) == "gpu-runner-777-1-12"
    assert naming.parameter_name("/p", slotted) == "/p/777-1-12/jitconfig"
    # The reaper reads the same key back from either name.
    assert naming.run_key_of_runner(naming.runner_name(slotted)) == "777-1-12"
    assert naming.run_key_of_parameter(naming.parameter_name("/p", slotted)) == "777-1-12"


def test_two_slots_of_one_run_get_their_own_runner_parameter_and_instance(
    settings, ctx, aws, github, github_double: GitHubDouble
) -> None:
    zero, one = launch_slots(settings, ctx, aws, github)
    assert (zero.runner_name, one.runner_name) == ("gpu-runner-777-1-0", "gpu-runner-777-1-1")
    assert zero.parameter == "/gpu-runner/demo/777-1-0/jitconfig"
    assert one.parameter == "/gpu-runner/demo/777-1-1/jitconfig"
    assert zero.runner_id != one.runner_id
    # Each label keeps its own 64 random bits after its slot's name.
    assert zero.label.startswith("gpu-runner-777-1-0-") and one.label.startswith("gpu-runner-777-1-1-")
    assert (
        len(zero.label.rsplit("-", 1)[1]) == 16
        and zero.label.rsplit("-", 1)[1] != one.label.rsplit("-", 1)[1]
    )
    assert {r["name"] for r in github_double.runners.values()} == {zero.runner_name, one.runner_name}
    assert parameter_names(aws) == {zero.parameter, one.parameter}
    by_id = {i["InstanceId"]: tags_of(i) for i in live_instances(aws)}
    assert set(by_id) == {zero.launched.instance_id, one.launched.instance_id}
    for outcome, slot in ((zero, "0"), (one, "1")):
        tags = by_id[outcome.launched.instance_id]
        assert tags["Name"] == outcome.runner_name and tags[naming.TAG_SLOT] == slot
        assert tags[naming.TAG_RUNNER_ID] == str(outcome.runner_id)
        listed = aws.client("ssm", REGION).list_tags_for_resource(
            ResourceType="Parameter", ResourceId=outcome.parameter
        )["TagList"]
        assert {t["Key"]: t["Value"] for t in listed}[naming.TAG_SLOT] == slot


def test_tearing_down_one_slot_leaves_the_other_untouched(
    settings, ctx, aws, github, github_double: GitHubDouble
) -> None:
    zero, one = launch_slots(settings, ctx, aws, github)

    def teardown(outcome: lifecycle.LaunchOutcome, slot: str) -> None:
        lifecycle.teardown(
            aws, github, RunScope(dataclasses.replace(ctx, slot=slot), settings.project, settings.ssm_prefix),
            region=REGION, instance_id=outcome.launched.instance_id, runner_id=outcome.runner_id,
            parameter=outcome.parameter,
        )  # fmt: skip

    teardown(zero, "0")
    assert state(aws, zero.launched.instance_id) in {"shutting-down", "terminated"}
    assert [i["InstanceId"] for i in live_instances(aws)] == [one.launched.instance_id]
    assert [r["name"] for r in github_double.runners.values()] == [one.runner_name]
    assert parameter_names(aws) == {one.parameter}
    teardown(one, "1")
    assert live_instances(aws) == [] and github_double.runners == {} and parameter_names(aws) == set()


def test_each_slots_stop_job_summary_names_its_slot(
    settings, ctx, aws, github, faults: AwsFaults, tmp_path: Path
) -> None:
    """The run's page shows every leg's stop summary one after another: the cost and timeline lines say whose."""
    for outcome in launch_slots(settings, ctx, aws, github):
        slot = outcome.runner_name.rsplit("-", 1)[1]
        faults.answer(
            "pricing", "GetProducts", get_products_answer(price_list_product("g4dn.xlarge", REGION, "0.526"))
        )
        summary = tmp_path / f"summary-{slot}.md"
        lifecycle.teardown(
            aws, github, RunScope(dataclasses.replace(ctx, slot=slot), settings.project, settings.ssm_prefix),
            region=REGION, instance_id=outcome.launched.instance_id, runner_id=outcome.runner_id,
            parameter=outcome.parameter,
            cost_request=lifecycle.CostRequest(100, "", 1, {"GITHUB_STEP_SUMMARY": str(summary)}, slot=slot),
        )  # fmt: skip
        text = summary.read_text()
        assert (
            f"**GPU cost (slot {slot}, attempt 1)**" in text
            and f"**Timeline (slot {slot}, attempt 1)**" in text
        )


def test_the_same_slot_twice_in_one_run_is_refused_and_the_first_is_untouched(
    settings, ctx, aws, github, github_double: GitHubDouble
) -> None:
    first = lifecycle.launch(settings, dataclasses.replace(ctx, slot="2"), aws, github)
    with pytest.raises(RunnerError, match="gpu-runner-777-1-2"):  # GitHub's 409: the name is taken
        lifecycle.launch(settings, dataclasses.replace(ctx, slot="2"), aws, github)
    assert [i["InstanceId"] for i in live_instances(aws)] == [first.launched.instance_id]
    assert list(github_double.runners) == [first.runner_id] and parameter_names(aws) == {first.parameter}


def test_the_reaper_reaps_both_slots_when_both_are_left(
    settings, ctx, aws, github, github_double: GitHubDouble
) -> None:
    zero, one = launch_slots(settings, ctx, aws, github)
    # Past both instances' deadline (max_runtime_minutes 60 + margins) and the parameters' grace.
    report = reaper.reap(settings, aws, github, now=datetime.now(UTC) + timedelta(hours=3))
    assert sorted(report.terminated) == sorted([zero.launched.instance_id, one.launched.instance_id])
    assert sorted(report.runners_deleted) == [zero.runner_name, one.runner_name]
    assert sorted(report.parameters_deleted) == [zero.parameter, one.parameter]
    assert live_instances(aws) == [] and github_double.runners == {} and parameter_names(aws) == set()


def test_the_reaper_pairs_each_runner_with_its_own_slots_instance(
    settings, ctx, aws, github, github_double: GitHubDouble
) -> None:
    """Slot 0 trains (runner busy, instance running); slot 1's instance is gone (reclaimed) and its runner stays
    offline. The reaper keeps slot 0 and removes slot 1's runner: were the slot not part of the run key, slot 0's
    live instance would vouch for slot 1's runner too and keep it."""
    zero, one = launch_slots(settings, ctx, aws, github)
    github_double.set_status(zero.runner_id, "online", busy=True)
    aws.client("ec2", REGION).terminate_instances(InstanceIds=[one.launched.instance_id])
    # Past reap_grace_minutes (20) and never-online (wait_timeout_seconds + 5 min), before the deadline (70 min).
    report = reaper.reap(settings, aws, github, now=datetime.now(UTC) + timedelta(minutes=30))
    assert report.kept == [zero.launched.instance_id] and report.terminated == []
    assert report.runners_deleted == [one.runner_name]
    assert [r["name"] for r in github_double.runners.values()] == [zero.runner_name]
    assert state(aws, zero.launched.instance_id) == "running"


def test_names_at_the_longest_slot_stay_inside_githubs_and_ssms_limits(ctx: RunContext) -> None:
    """The longest slot with any int64 run id (GitHub's run ids are int64) fits the runner name limit with an
    attempt of up to 26 digits; one more character is refused by our check, before GitHub would refuse it."""
    longest = dataclasses.replace(
        ctx, run_id=str(2**63 - 1), run_attempt="9" * 26, slot="9" * naming.SLOT_MAX_DIGITS
    )
    assert len(naming.runner_name(longest)) == RUNNER_NAME_MAX == naming.MAX_RUNNER_NAME
    with pytest.raises(RunnerError, match="longer than GitHub's 64 characters"):
        naming.runner_name(dataclasses.replace(longest, run_attempt="9" * 27))
    # SSM (botocore's ssm model, PutParameter.Name): at most 1011 characters counting the ARN before the name,
    # hierarchies at most 15 levels. The template's prefix at its longest owner (39) and repository (100).
    prefix = f"/gpu-runner/{'o' * 39}/{'r' * 100}"
    arn = "arn:aws-us-gov:ssm:us-gov-west-1:123456789012:parameter"
    name = naming.parameter_name(prefix, longest)
    assert len(arn + name) <= 1011
    # The slot adds characters to the run key, never a level.
    assert name.count("/") == naming.parameter_name(prefix, ctx).count("/") <= 15


def test_the_github_double_refuses_a_runner_name_longer_than_github_allows(github: GitHubRunners) -> None:
    label = "gpu-runner-1-1-" + "a" * 16
    assert github.create_jit_config("n" * RUNNER_NAME_MAX, [label]).runner.name == "n" * RUNNER_NAME_MAX
    with pytest.raises(RunnerError, match="422"):
        github.create_jit_config("n" * (RUNNER_NAME_MAX + 1), [label])


# ------------------------------------------------------------------------------------------ the CLI's --slot
@pytest.fixture
def aws_calls(monkeypatch: pytest.MonkeyPatch, session: boto3.Session, aws: Aws) -> list[str]:
    """Every AWS operation the CLI sends (its Aws() built on the moto session, with a before-call recorder)."""
    calls: list[str] = []
    session.events.register("before-call", lambda model, **_: calls.append(model.name))
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    return calls


def outputs(cli_env: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (cli_env.parent / "out").read_text().splitlines())


@pytest.mark.parametrize("bad", BAD_SLOTS)
@pytest.mark.parametrize(
    "command",
    [["launch"], ["wait", "--region=eu-west-1", "--instance-id=i-0123456789abcdef0", "--runner-id=1"]],
)
def test_a_bad_slot_is_refused_before_any_api_call(
    cli_env: Path, github_double: GitHubDouble, aws_calls: list[str], capsys, command: list[str], bad: str
) -> None:
    assert cli.main(["--settings", str(cli_env), *command, f"--slot={bad}"]) == 1
    assert "error: --slot: " in capsys.readouterr().err
    assert aws_calls == [] and github_double.calls == []


def test_the_cli_launches_a_slot_and_wait_refuses_another_slots_runner(
    cli_env: Path, github_double: GitHubDouble, aws_calls: list[str], aws: Aws, capsys
) -> None:
    assert cli.main(["--settings", str(cli_env), "launch", "--spot=false", "--slot=3"]) == 0
    out = outputs(cli_env)
    assert out["runner-name"] == "gpu-runner-4321-2-3"
    ids = [
        f"--region={out['region']}",
        f"--instance-id={out['instance-id']}",
        f"--runner-id={out['runner-id']}",
    ]
    # Slot 4's wait handed slot 3's runner id: refused at the first look, not reported online.
    assert cli.main(["--settings", str(cli_env), "wait", *ids, "--slot=4", "--timeout=30"]) == 1
    assert (
        f"runner {out['runner-id']} is gpu-runner-4321-2-3, not gpu-runner-4321-2-4"
        in capsys.readouterr().err
    )
    github_double.set_status(int(out["runner-id"]), "online")
    assert cli.main(["--settings", str(cli_env), "wait", *ids, "--slot=3", "--timeout=30"]) == 0


def test_teardown_with_a_bad_slot_touches_nothing_and_the_right_slot_tears_down(
    cli_env: Path, github_double: GitHubDouble, aws_calls: list[str], aws: Aws, capsys, tmp_path: Path
) -> None:
    """The slot is part of the run key (ownership.py): a malformed one names none of this run's resources (launch
    refuses it before any call), so nothing is asked of AWS or GitHub; the leg's own slot then ends them."""
    assert cli.main(["--settings", str(cli_env), "launch", "--spot=false", "--slot=5"]) == 0
    out = outputs(cli_env)
    flags = [f"--region={out['region']}", f"--instance-id={out['instance-id']}", f"--runner-id={out['runner-id']}",
             f"--parameter={out['parameter']}"]  # fmt: skip
    calls_before, github_before = len(aws_calls), len(github_double.calls)
    assert cli.main(["--settings", str(cli_env), "teardown", *flags, "--slot=x5"]) == 1
    assert "error: --slot: 'x5' is not a trial number" in capsys.readouterr().err
    assert (len(aws_calls), len(github_double.calls)) == (calls_before, github_before)
    assert state(aws, out["instance-id"]) == "running"
    assert cli.main(["--settings", str(cli_env), "teardown", *flags, "--slot=5"]) == 0
    assert state(aws, out["instance-id"]) in {"shutting-down", "terminated"}
    assert github_double.runners == {} and parameter_names(aws) == set()
