"""The scheduled safety net: remove what a crashed or skipped `stop` job left behind.

It only ever looks at resources that carry our marks: instances tagged gpu-runner:managed-by + this project (and
launched with our instance profile, when one is configured: tags alone can be copied by anyone who may tag),
runners whose name starts with our prefix, parameters below our SSM prefix. Anything else is invisible to it.

An instance is terminated when it is past its expires-at, when its runner is gone, or when its runner registered
but never came online within wait_timeout_seconds plus a margin (the start job failed and its stop job never ran:
without this rule it billed until its expiry, ~190 minutes). It never touches a busy runner's instance: that
runner is deregistered first, which GitHub refuses (422) while a job runs, and only then is the instance
terminated (terraform-aws-github-runner#4391 killed running jobs as orphans; #5085: deregister before terminate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from . import ec2, naming, parameters
from .aws import Aws
from .errors import RunnerError
from .github import GitHubRunners, Runner
from .settings import Settings

LIVE_STATES = ["pending", "running", "stopping", "stopped"]
# After wait_timeout_seconds the start job has given up on the runner; the margin covers GitHub's runners API
# lagging behind a fresh registration (terraform-aws-github-runner#4391) and the wait step's last poll.
NEVER_ONLINE_MARGIN = timedelta(minutes=5)


@dataclass
class ReapReport:
    terminated: list[str] = field(default_factory=list)
    runners_deleted: list[str] = field(default_factory=list)
    parameters_deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def our_instances(client: Any, project: str) -> list[dict[str, Any]]:
    filters = [
        {"Name": f"tag:{naming.MANAGED_BY_KEY}", "Values": [naming.MANAGED_BY_VALUE]},
        {"Name": f"tag:{naming.TAG_PROJECT}", "Values": [project]},
        {"Name": "instance-state-name", "Values": LIVE_STATES},
    ]
    pages = client.get_paginator("describe_instances").paginate(Filters=filters)
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def _expired(tags: dict[str, str], now: datetime) -> bool:
    try:
        expires = datetime.strptime(tags[naming.TAG_EXPIRES_AT], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (KeyError, ValueError):
        return True  # ours but without a readable expiry: it cannot be trusted to end by itself
    return expires <= now


def launched_with_profile(instance: dict[str, Any], profile: str) -> bool:
    """True when no profile is configured, or the instance carries it (by ARN, or by name at the ARN's end)."""
    if not profile:
        return True
    arn = str(instance.get("IamInstanceProfile", {}).get("Arn", ""))
    return arn == profile if profile.startswith("arn:") else arn.rpartition("/")[2] == profile


def _never_came_online(runner: Runner, tags: dict[str, str]) -> bool:
    """Registered for this very instance (same name), offline and idle: no job can be running on it."""
    return runner.name == tags.get("Name") and runner.status == "offline" and not runner.busy


def _why_orphaned(
    github: GitHubRunners,
    instance: dict[str, Any],
    tags: dict[str, str],
    now: datetime,
    grace: timedelta,
    never_online_after: timedelta,
    report: ReapReport,
    log: Callable[[str], None],
) -> str | None:
    """Why this instance of ours should be terminated, or None to keep it."""
    if _expired(tags, now):
        return "past its expires-at"
    runner_id, age = tags.get(naming.TAG_RUNNER_ID, ""), now - instance["LaunchTime"]
    if not runner_id.isdigit() or age <= min(grace, never_online_after):
        return None
    runner = github.get_runner(int(runner_id))
    if runner is None:
        return "its runner is gone" if age > grace else None
    if age <= never_online_after or not _never_came_online(runner, tags):
        return None
    # Deregister first: GitHub refuses while a job runs (422), and a deleted runner can take no job, so the
    # instance cannot have become busy between our look and its termination.
    try:
        github.delete_runner(runner.id)
    except RunnerError as error:
        log(f"kept {instance['InstanceId']}: its runner {runner.name} could not be removed ({error})")
        return None
    report.runners_deleted.append(runner.name)
    log(f"deleted runner {runner.name} (id {runner.id}): registered but never online")
    minutes = never_online_after.total_seconds() / 60
    return f"its runner registered but was not online {minutes:.0f} min after launch"


def reap(
    settings: Settings,
    aws: Aws,
    github: GitHubRunners,
    *,
    regions: tuple[str, ...] = (),
    now: datetime | None = None,
    log: Callable[[str], None] = print,
) -> ReapReport:
    now = now or datetime.now(UTC)
    grace = timedelta(minutes=settings.reap_grace_minutes)
    never_online_after = timedelta(seconds=settings.wait_timeout_seconds) + NEVER_ONLINE_MARGIN
    report = ReapReport()
    live_run_keys: set[str] = set()

    for region in dict.fromkeys((settings.region, *regions)):
        client = aws.client("ec2", region)
        for instance in our_instances(client, settings.project):
            tags, instance_id = _tags(instance), instance["InstanceId"]
            if not launched_with_profile(instance, settings.instance_profile):
                log(f"ignored {instance_id} in {region}: our tags but not our instance profile")
                continue
            reason = _why_orphaned(github, instance, tags, now, grace, never_online_after, report, log)
            if reason is None:
                live_run_keys.add(naming.run_key_of_runner(tags.get("Name", "")) or "")
                report.kept.append(instance_id)
                continue
            ec2.terminate(client, instance_id)
            report.terminated.append(instance_id)
            log(f"terminated {instance_id} in {region}: {reason}")

    ssm = aws.client("ssm", settings.region)
    fresh_parameter_keys: set[str] = set()
    for meta in parameters.list_parameters(ssm, settings.ssm_prefix):
        if now - meta["LastModifiedDate"] > grace:
            parameters.delete_parameter(ssm, meta["Name"])
            report.parameters_deleted.append(meta["Name"])
            log(f"deleted parameter {meta['Name']}: older than {settings.reap_grace_minutes} min")
        else:
            fresh_parameter_keys.add(naming.run_key_of_parameter(meta["Name"]))

    for runner in github.list_runners():
        key = naming.run_key_of_runner(runner.name)
        # A runner of a launch in progress is offline with a fresh parameter and maybe no instance yet.
        if key is None or runner.status != "offline" or runner.busy:
            continue
        if key in live_run_keys or key in fresh_parameter_keys:
            continue
        if github.delete_runner(runner.id):
            report.runners_deleted.append(runner.name)
            log(f"deleted offline runner {runner.name} (id {runner.id})")
    log(
        f"reaper: {len(report.terminated)} instance(s) terminated, {len(report.runners_deleted)} runner(s) and "
        f"{len(report.parameters_deleted)} parameter(s) deleted, {len(report.kept)} instance(s) healthy"
    )
    return report
