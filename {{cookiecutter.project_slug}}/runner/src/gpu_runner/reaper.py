"""The scheduled safety net: remove what a crashed or skipped `stop` job left behind.

It only ever looks at resources that carry our marks: instances tagged gpu-runner:managed-by + this project,
runners whose name starts with our prefix, parameters below our SSM prefix. Anything else is invisible to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from . import ec2, naming, parameters
from .aws import Aws
from .github import GitHubRunners
from .settings import Settings

LIVE_STATES = ["pending", "running", "stopping", "stopped"]


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
    report = ReapReport()
    live_run_keys: set[str] = set()

    for region in dict.fromkeys((settings.region, *regions)):
        client = aws.client("ec2", region)
        for instance in our_instances(client, settings.project):
            tags, instance_id = _tags(instance), instance["InstanceId"]
            runner_id = tags.get(naming.TAG_RUNNER_ID, "")
            old_enough = now - instance["LaunchTime"] > grace
            if _expired(tags, now):
                reason = "past its expires-at"
            elif old_enough and runner_id.isdigit() and github.get_runner(int(runner_id)) is None:
                reason = "its runner is gone"
            else:
                live_run_keys.add(naming.run_key_of_runner(tags.get(naming.TAG_LABEL, "")) or "")
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
