"""The reaper removes only what is ours and stale; everything else, and anything still in grace, survives."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from gpu_runner.core import naming
from gpu_runner.core.aws import Aws
from gpu_runner.core.naming import RunContext
from gpu_runner.ec2_runner import lifecycle, reaper
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.github_double import GitHubDouble


def launch_raw(aws: Aws, ami: str, tags: dict[str, str]) -> str:
    reply = aws.client("ec2", REGION).run_instances(
        ImageId=ami, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )  # fmt: skip
    return reply["Instances"][0]["InstanceId"]


def described(aws: Aws, instance_id: str) -> dict:
    reply = aws.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])
    return reply["Reservations"][0]["Instances"][0]


def state(aws: Aws, instance_id: str) -> str:
    return described(aws, instance_id)["State"]["Name"]


def reap_around(settings, aws: Aws, github, instance_id: str, bound: datetime) -> reaper.ReapReport:
    """Reap 1 s before `bound` (the instance must be kept) and 1 s after; returns the second pass's report."""
    before = reaper.reap(settings, aws, github, now=bound - timedelta(seconds=1))
    assert before.terminated == [] and state(aws, instance_id) == "running"
    return reaper.reap(settings, aws, github, now=bound + timedelta(seconds=1))


def ours(settings, run_id: str, runner_id: int, expires_at: datetime) -> dict[str, str]:
    ctx = RunContext("octo-org/octo-repo", run_id, "1", "train/x", "abc")
    return lifecycle.instance_tags(settings, ctx, runner_id=runner_id, expires_at=expires_at)


def test_reaper_terminates_only_our_stale_instances(
    settings, aws, ami, github, github_double: GitHubDouble
) -> None:
    now = datetime.now(UTC)
    live = github_double.add_runner("gpu-runner-1-1", status="online", busy=True)
    healthy_runner = github_double.add_runner("gpu-runner-2-1", status="online", busy=True)
    expired = launch_raw(aws, ami, ours(settings, "1", live["id"], now - timedelta(minutes=1)))
    healthy = launch_raw(aws, ami, ours(settings, "2", healthy_runner["id"], now + timedelta(hours=2)))
    orphan = launch_raw(
        aws, ami, ours(settings, "3", 999_999, now + timedelta(hours=2))
    )  # its runner is gone
    untagged = launch_raw(aws, ami, {"Name": "somebody-elses-gpu"})
    other_project = launch_raw(
        aws, ami, {**ours(settings, "4", 1, now - timedelta(days=1)), naming.TAG_PROJECT: "other"}
    )
    # Another repository baked with the same slug tags the same project: not ours either.
    elsewhere = {
        **ours(settings, "6", 1, now - timedelta(days=1)),
        naming.TAG_REPOSITORY: "other-org/octo-repo",
    }
    other_repository = launch_raw(aws, ami, elsewhere)
    unmanaged = launch_raw(
        aws,
        ami,
        {
            k: v
            for k, v in ours(settings, "5", 1, now - timedelta(days=1)).items()
            if k != naming.MANAGED_BY_KEY
        },
    )

    # Inside the grace period a missing runner is not yet a reason (it may still be registering).
    report = reaper.reap(settings, aws, github, now=now)
    assert report.terminated == [expired]
    assert state(aws, orphan) == "running"

    later = now + timedelta(minutes=settings.reap_grace_minutes + 1)
    report = reaper.reap(settings, aws, github, now=later)
    assert report.terminated == [orphan]
    for survivor in (healthy, untagged, other_project, other_repository, unmanaged):
        assert state(aws, survivor) == "running"


def test_reaper_deletes_offline_runners_with_our_prefix_only(
    settings, aws, ami, github, github_double
) -> None:
    now = datetime.now(UTC)
    stale = github_double.add_runner("gpu-runner-10-1", status="offline")
    busy = github_double.add_runner("gpu-runner-11-1", status="online", busy=True)
    foreign = github_double.add_runner("build-box-1", status="offline")
    with_instance = github_double.add_runner("gpu-runner-12-1", status="offline")
    launch_raw(aws, ami, {**ours(settings, "12", with_instance["id"], now + timedelta(hours=1))})
    launching = github_double.add_runner("gpu-runner-13-1", status="offline")
    aws.client("ssm", REGION).put_parameter(
        Name=f"{settings.ssm_prefix}/13-1/jitconfig", Value="x", Type="SecureString"
    )

    report = reaper.reap(settings, aws, github, now=now)
    assert report.runners_deleted == ["gpu-runner-10-1"]
    remaining = {r["name"] for r in github_double.runners.values()}
    assert remaining == {busy["name"], foreign["name"], with_instance["name"], launching["name"]}
    assert stale["id"] not in github_double.runners


def test_reaper_deletes_parameters_older_than_grace_under_our_prefix(settings, aws, github) -> None:
    ssm = aws.client("ssm", REGION)
    ssm.put_parameter(Name=f"{settings.ssm_prefix}/20-1/jitconfig", Value="x", Type="SecureString")
    ssm.put_parameter(Name="/someone-else/20-1/jitconfig", Value="keep", Type="SecureString")
    now = datetime.now(UTC)
    assert reaper.reap(settings, aws, github, now=now).parameters_deleted == []
    later = now + timedelta(minutes=settings.reap_grace_minutes + 1)
    report = reaper.reap(settings, aws, github, now=later)
    assert report.parameters_deleted == [f"{settings.ssm_prefix}/20-1/jitconfig"]
    assert (
        ssm.get_parameter(Name="/someone-else/20-1/jitconfig", WithDecryption=True)["Parameter"]["Value"]
        == "keep"
    )
    ssm.delete_parameter(Name="/someone-else/20-1/jitconfig")


def our_launch(settings, aws: Aws, ami: str, github_double: GitHubDouble, run_id: str, **runner: object):
    """An instance as launch leaves it, with its JIT registration (`runner`: the double's status and busy)."""
    ctx = RunContext("octo-org/octo-repo", run_id, "1", "train/x", "abc")
    registration = github_double.add_runner(naming.runner_name(ctx), **runner)
    tags = lifecycle.instance_tags(
        settings, ctx, runner_id=registration["id"], expires_at=datetime.now(UTC) + timedelta(hours=3)
    )
    return launch_raw(aws, ami, tags), registration["id"]


def test_reaper_ends_an_instance_whose_runner_never_came_online(
    settings, aws, ami, github, github_double: GitHubDouble
) -> None:
    """The start job gave up (wait_timeout_seconds) and its stop job never ran: before, such an instance billed
    until its expires-at (about 190 minutes)."""
    never_online, never_online_runner = our_launch(settings, aws, ami, github_double, "30", status="offline")
    busy, busy_runner = our_launch(settings, aws, ami, github_double, "31", status="online", busy=True)
    # Offline but busy: the runner lost its connection during a job; GitHub still counts the job as running.
    lost, lost_runner = our_launch(settings, aws, ami, github_double, "32", status="offline", busy=True)
    idle, idle_runner = our_launch(settings, aws, ami, github_double, "33", status="online")
    # The reaper ages an instance from its LaunchTime, so the bounds are taken from it (not from the clock after
    # four launches: on a loaded 2-core machine those took more than the 1 s margin below).
    launched = described(aws, never_online)["LaunchTime"]

    # Within wait_timeout_seconds + margin the runner may still be connecting (or GitHub's API lagging).
    within = launched + timedelta(seconds=settings.wait_timeout_seconds) + reaper.NEVER_ONLINE_MARGIN
    report = reap_around(settings, aws, github, never_online, within)
    assert report.terminated == [never_online]
    assert state(aws, never_online) in {"shutting-down", "terminated"}
    assert never_online_runner not in github_double.runners
    assert report.runners_deleted == ["gpu-runner-30-1"]
    for kept, runner_id in ((busy, busy_runner), (lost, lost_runner), (idle, idle_runner)):
        assert state(aws, kept) == "running"
        assert runner_id in github_double.runners
    # Deregistered before terminated, and only that one runner.
    deletes = [c for c in github_double.calls if c.method == "DELETE"]
    assert [c.path.rsplit("/", 1)[1] for c in deletes] == [str(never_online_runner)]


@pytest.mark.slow  # waits through the GitHub client's retries of the refused delete
def test_reaper_keeps_the_instance_when_its_runner_turns_busy_at_the_last_moment(
    settings, aws, ami, github, github_double: GitHubDouble
) -> None:
    """Between the reaper's look (offline, idle) and its delete, a job starts: GitHub refuses the delete (422),
    and the instance is kept."""
    instance, runner_id = our_launch(settings, aws, ami, github_double, "34", status="offline")
    github_double.fail("DELETE", rf"/actions/runners/{runner_id}$", 422, times=1000)
    later = datetime.now(UTC) + timedelta(seconds=settings.wait_timeout_seconds) + timedelta(minutes=6)
    report = reaper.reap(settings, aws, github, now=later)
    assert report.terminated == []
    assert state(aws, instance) == "running"
    assert runner_id in github_double.runners


def test_reaper_ignores_our_tags_on_an_instance_without_our_profile(
    settings, aws, ami, github, github_double: GitHubDouble
) -> None:
    """Anyone who may tag can copy our tags; with an instance profile configured, only instances launched with
    it are the reaper's to end."""
    iam = aws.client("iam", REGION)
    for name in ("gpu-runner-demo", "someone-else"):
        iam.create_instance_profile(InstanceProfileName=name)
    ours_profile = dataclasses.replace(settings, instance_profile="gpu-runner-demo")
    expired = ours(settings, "40", 1, datetime.now(UTC) - timedelta(minutes=1))
    client = aws.client("ec2", REGION)

    def launch_with(profile: str) -> str:
        reply = client.run_instances(
            ImageId=ami, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1, IamInstanceProfile={"Name": profile},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in expired.items()]}],
        )  # fmt: skip
        return reply["Instances"][0]["InstanceId"]

    mine, theirs = launch_with("gpu-runner-demo"), launch_with("someone-else")
    report = reaper.reap(ours_profile, aws, github)
    assert report.terminated == [mine]
    assert state(aws, theirs) == "running"
    for name in ("gpu-runner-demo", "someone-else"):
        iam.delete_instance_profile(InstanceProfileName=name)


# --- tags are the launcher's word: none of them keeps an instance alive ---------------------------------------------

FOREVER = datetime(2099, 1, 1, tzinfo=UTC)


def test_forged_tags_do_not_keep_an_instance(settings, aws, ami, github, github_double: GitHubDouble) -> None:
    """The issue's instance (expires-at=2099, runner-id=none), one without a runner-id, one whose runner-id names a
    long-lived busy runner that is not its registration: all orphaned once the grace period is over. Before, all
    three were kept until 2099 (a runner id that is not a number was never looked up, a found runner was trusted).
    One test for the three: each reaper test pays seconds of fixture setup on a loaded 2-core machine."""
    permanent = github_double.add_runner("build-box-1", status="online", busy=True)
    forged = launch_raw(aws, ami, {**ours(settings, "50", 1, FOREVER), naming.TAG_RUNNER_ID: "none"})
    missing = launch_raw(
        aws, ami, {k: v for k, v in ours(settings, "51", 1, FOREVER).items() if k != naming.TAG_RUNNER_ID}
    )
    borrowed = launch_raw(aws, ami, ours(settings, "52", permanent["id"], FOREVER))
    launched = described(aws, forged)["LaunchTime"]
    grace = timedelta(minutes=settings.reap_grace_minutes)

    # Within the grace period it may still be registering: kept.
    report = reaper.reap(settings, aws, github, now=launched + grace - timedelta(seconds=1))
    assert report.terminated == []
    report = reaper.reap(settings, aws, github, now=launched + grace + timedelta(minutes=1))
    assert sorted(report.terminated) == sorted([forged, missing, borrowed])
    assert permanent["id"] in github_double.runners  # the other runner is left alone


def test_the_deadline_is_launch_time_plus_max_runtime_whatever_expires_at_says(
    settings, aws, ami, github, github_double: GitHubDouble
) -> None:
    """A healthy-looking instance (its own runner, online and busy) tagged to expire in 2099 ends at LaunchTime +
    max_runtime_minutes (of the settings the reaper runs with) + the margin; an earlier expires-at still wins."""
    ctx = RunContext("octo-org/octo-repo", "60", "1", "train/x", "abc")
    runner = github_double.add_runner(naming.runner_name(ctx), status="online", busy=True)
    tags = lifecycle.instance_tags(settings, ctx, runner_id=runner["id"], expires_at=FOREVER)
    long_tagged = launch_raw(aws, ami, tags)
    launched = described(aws, long_tagged)["LaunchTime"]
    limit = launched + timedelta(minutes=settings.max_runtime_minutes) + reaper.DEADLINE_MARGIN

    report = reap_around(settings, aws, github, long_tagged, limit)
    assert report.terminated == [long_tagged]

    # The tag can shorten the deadline (launch wrote it from the same settings), never lengthen it.
    early = datetime(2026, 1, 1, tzinfo=UTC)
    instance = {"LaunchTime": early}
    assert reaper.deadline(instance, {naming.TAG_EXPIRES_AT: "2026-01-01T00:30:00Z"}, timedelta(hours=3)) == (
        early + timedelta(minutes=30)
    )
    for unreadable in ("2099-01-01", "soon", ""):
        assert reaper.deadline(instance, {naming.TAG_EXPIRES_AT: unreadable}, timedelta(hours=3)) == (
            early + timedelta(hours=3) + reaper.DEADLINE_MARGIN
        )


@pytest.mark.parametrize("value", ["none", "", "0", "-1", "007", "1e3", " 12", "12345678901234567890"])
def test_runner_id_tags_launch_never_writes_are_malformed(value: str) -> None:
    assert reaper.runner_id_of({naming.TAG_RUNNER_ID: value}) is None
    assert reaper.runner_id_of({naming.TAG_RUNNER_ID: "42"}) == 42


def test_a_terminate_aws_refuses_does_not_stop_the_sweep(
    settings, aws, ami, github, github_double: GitHubDouble, faults
) -> None:
    """The roles may end only instances of the stack's instance profile: without instance_profile in the settings
    the reaper cannot tell a look-alike, and AWS answers UnauthorizedOperation for it. The sweep goes on."""
    expired = datetime.now(UTC) - timedelta(minutes=1)
    look_alike = launch_raw(aws, ami, ours(settings, "90", 1, expired))
    mine = launch_raw(aws, ami, ours(settings, "91", 1, expired))
    faults.fail(
        "ec2", "TerminateInstances", "UnauthorizedOperation", status=403,
        when=lambda params: params.get("InstanceId.1") == look_alike,
    )  # fmt: skip
    report = reaper.reap(settings, aws, github)
    assert report.terminated == [mine] and look_alike in report.kept
    assert state(aws, look_alike) == "running"
