"""The reaper removes only what is ours and stale; everything else, and anything still in grace, survives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aws_constants import REGION
from github_double import GitHubDouble

from gpu_runner import lifecycle, naming, reaper
from gpu_runner.aws import Aws
from gpu_runner.naming import RunContext

SILENT = {"log": lambda _: None}


def launch_raw(aws: Aws, ami: str, tags: dict[str, str]) -> str:
    reply = aws.client("ec2", REGION).run_instances(
        ImageId=ami, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )  # fmt: skip
    return reply["Instances"][0]["InstanceId"]


def state(aws: Aws, instance_id: str) -> str:
    reply = aws.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])
    return reply["Reservations"][0]["Instances"][0]["State"]["Name"]


def ours(settings, run_id: str, runner_id: int, expires_at: datetime) -> dict[str, str]:
    ctx = RunContext("octo-org/octo-repo", run_id, "1", "train/x", "abc")
    return lifecycle.instance_tags(settings, ctx, runner_id=runner_id, expires_at=expires_at)


def test_reaper_terminates_only_our_stale_instances(
    settings, aws, ami, github, github_double: GitHubDouble
) -> None:
    now = datetime.now(UTC)
    live = github_double.add_runner("gpu-runner-1-1", status="online", busy=True)
    expired = launch_raw(aws, ami, ours(settings, "1", live["id"], now - timedelta(minutes=1)))
    healthy = launch_raw(aws, ami, ours(settings, "2", live["id"], now + timedelta(hours=2)))
    orphan = launch_raw(
        aws, ami, ours(settings, "3", 999_999, now + timedelta(hours=2))
    )  # its runner is gone
    untagged = launch_raw(aws, ami, {"Name": "somebody-elses-gpu"})
    other_project = launch_raw(
        aws, ami, {**ours(settings, "4", 1, now - timedelta(days=1)), naming.TAG_PROJECT: "other"}
    )
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
    report = reaper.reap(settings, aws, github, now=now, **SILENT)
    assert report.terminated == [expired]
    assert state(aws, orphan) == "running"

    later = now + timedelta(minutes=settings.reap_grace_minutes + 1)
    report = reaper.reap(settings, aws, github, now=later, **SILENT)
    assert report.terminated == [orphan]
    for survivor in (healthy, untagged, other_project, unmanaged):
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

    report = reaper.reap(settings, aws, github, now=now, **SILENT)
    assert report.runners_deleted == ["gpu-runner-10-1"]
    remaining = {r["name"] for r in github_double.runners.values()}
    assert remaining == {busy["name"], foreign["name"], with_instance["name"], launching["name"]}
    assert stale["id"] not in github_double.runners


def test_reaper_deletes_parameters_older_than_grace_under_our_prefix(settings, aws, github) -> None:
    ssm = aws.client("ssm", REGION)
    ssm.put_parameter(Name=f"{settings.ssm_prefix}/20-1/jitconfig", Value="x", Type="SecureString")
    ssm.put_parameter(Name="/someone-else/20-1/jitconfig", Value="keep", Type="SecureString")
    now = datetime.now(UTC)
    assert reaper.reap(settings, aws, github, now=now, **SILENT).parameters_deleted == []
    later = now + timedelta(minutes=settings.reap_grace_minutes + 1)
    report = reaper.reap(settings, aws, github, now=later, **SILENT)
    assert report.parameters_deleted == [f"{settings.ssm_prefix}/20-1/jitconfig"]
    assert (
        ssm.get_parameter(Name="/someone-else/20-1/jitconfig", WithDecryption=True)["Parameter"]["Value"]
        == "keep"
    )
    ssm.delete_parameter(Name="/someone-else/20-1/jitconfig")
