"""The scheduled safety net: remove what a crashed or skipped `stop` job left behind.

It only ever looks at resources that carry our marks: instances tagged gpu-runner:managed-by + this project + this
repository (and launched with our instance profile, when one is configured: tags alone can be copied by anyone who
may tag), runners whose name starts with our prefix, parameters below our SSM prefix. Anything else is invisible
to it.

Tags are the launcher's word, so none of them can keep an instance alive: its deadline is its LaunchTime (set by
EC2) plus max_runtime_minutes from the settings the reaper runs with (the default branch's: reap.yml runs only
there) plus a margin, and the expires-at tag can only bring that deadline earlier. A missing or malformed runner-id
tag, or one naming another runner, means orphaned (terminated after the grace period).

An instance is terminated when it is past its deadline, when its runner is gone or unknown, or when its runner
registered but never came online within wait_timeout_seconds plus a margin (the start job failed and its stop job
never ran: without this rule it billed until its expiry, ~190 minutes). It never touches a busy runner's instance: that
runner is deregistered first, which GitHub refuses (422) while a job runs, and only then is the instance
terminated (terraform-aws-github-runner#4391 killed running jobs as orphans; #5085: deregister before terminate).

Without a GitHub client (`github=None`: the AWS-side pass that reaper_lambda runs inside AWS) it applies only the
rules AWS alone can judge (expiry, stale parameters) and never imports PyGithub: the Lambda runtime ships boto3 only.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from gpu_runner.core import naming
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import ec2, ssm

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # types only: importing .github loads PyGithub, which the Lambda package does not carry
    from gpu_runner.core.github import GitHubRunners, Runner

LIVE_STATES = ["pending", "running", "stopping", "stopped"]
# After wait_timeout_seconds the start job has given up on the runner; the margin covers GitHub's runners API
# lagging behind a fresh registration (terraform-aws-github-runner#4391) and the wait step's last poll.
NEVER_ONLINE_MARGIN = timedelta(minutes=5)
# The instance halts itself max_runtime_minutes after its boot script starts, a little after LaunchTime; launch
# tags expires-at with the same 10-minute margin (lifecycle.EXPIRY_MARGIN, not imported: the reaper stays free of
# the launch code).
DEADLINE_MARGIN = timedelta(minutes=10)
EXPIRES_AT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# GitHub's runner ids are positive integers; anything else in the tag (none, -1, 007, 1e3) was not written by launch.
_RUNNER_ID = re.compile(r"[1-9][0-9]{0,18}")


@dataclass(frozen=True)
class _Limits:
    grace: timedelta
    never_online_after: timedelta
    max_runtime: timedelta


@dataclass
class ReapReport:
    terminated: list[str] = field(default_factory=list)
    runners_deleted: list[str] = field(default_factory=list)
    parameters_deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def our_instances(client: Any, project: str, repository: str) -> list[dict[str, Any]]:
    """Live instances tagged as this project's of this repository (two repositories may share a project slug)."""
    filters = [
        {"Name": f"tag:{naming.MANAGED_BY_KEY}", "Values": [naming.MANAGED_BY_VALUE]},
        {"Name": f"tag:{naming.TAG_PROJECT}", "Values": [project]},
        {"Name": f"tag:{naming.TAG_REPOSITORY}", "Values": [naming.tag_value(repository)]},
        {"Name": "instance-state-name", "Values": LIVE_STATES},
    ]
    pages = client.get_paginator("describe_instances").paginate(Filters=filters)
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def deadline(instance: dict[str, Any], tags: dict[str, str], max_runtime: timedelta) -> datetime:
    """LaunchTime + max runtime + margin; an earlier expires-at tag wins, a later or unreadable one is ignored."""
    computed = instance["LaunchTime"] + max_runtime + DEADLINE_MARGIN
    try:
        tagged = datetime.strptime(tags.get(naming.TAG_EXPIRES_AT, ""), EXPIRES_AT_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return computed
    return min(computed, tagged)


def runner_id_of(tags: dict[str, str]) -> int | None:
    """The runner-id tag as launch writes it (a positive integer), else None."""
    value = tags.get(naming.TAG_RUNNER_ID, "")
    return int(value) if _RUNNER_ID.fullmatch(value) else None


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
    github: GitHubRunners | None,
    instance: dict[str, Any],
    tags: dict[str, str],
    now: datetime,
    limits: _Limits,
    report: ReapReport,
) -> str | None:
    """Why this instance of ours should be terminated, or None to keep it."""
    grace, never_online_after = limits.grace, limits.never_online_after
    if deadline(instance, tags, limits.max_runtime) <= now:
        return "past its deadline (launch time + max_runtime_minutes, or an earlier expires-at)"
    runner_id, age = runner_id_of(tags), now - instance["LaunchTime"]
    if runner_id is None:
        return "its runner-id tag is missing or malformed" if age > grace else None
    if age <= min(grace, never_online_after):
        return None
    if github is None:  # AWS-side pass: whether the runner is gone is GitHub's to say (reap.yml asks it)
        return None
    runner = github.get_runner(runner_id)
    if runner is None:
        return "its runner is gone" if age > grace else None
    if runner.name != tags.get("Name"):
        # A runner-id of some other runner (a long-lived one, say) must not keep this instance alive.
        return f"its runner-id names another runner ({runner.name})" if age > grace else None
    if age <= never_online_after or not _never_came_online(runner, tags):
        return None
    # Deregister first: GitHub refuses while a job runs (422), and a deleted runner can take no job, so the
    # instance cannot have become busy between our look and its termination.
    try:
        github.delete_runner(runner.id)
    except RunnerError as error:
        log.info(f"kept {instance['InstanceId']}: its runner {runner.name} could not be removed ({error})")
        return None
    report.runners_deleted.append(runner.name)
    log.info(f"deleted runner {runner.name} (id {runner.id}): registered but never online")
    minutes = never_online_after.total_seconds() / 60
    return f"its runner registered but was not online {minutes:.0f} min after launch"


def reap(
    settings: Settings,
    aws: Aws,
    github: GitHubRunners | None,
    *,
    repository: str = "",
    regions: tuple[str, ...] = (),
    now: datetime | None = None,
) -> ReapReport:
    """`repository` (owner/name): whose instances these are; defaults to the GitHub client's (the Lambda has none)."""
    repository = repository or (github.repository if github is not None else "")
    if not repository:
        raise ValueError("reap needs the repository (owner/name) whose instances it may end")
    now = now or datetime.now(UTC)
    grace = timedelta(minutes=settings.reap_grace_minutes)
    limits = _Limits(
        grace=grace,
        never_online_after=timedelta(seconds=settings.wait_timeout_seconds) + NEVER_ONLINE_MARGIN,
        max_runtime=timedelta(minutes=settings.max_runtime_minutes),
    )
    report = ReapReport()
    live_run_keys: set[str] = set()

    for region in dict.fromkeys((settings.region, *regions)):
        client = aws.client("ec2", region)
        for instance in our_instances(client, settings.project, repository):
            tags, instance_id = _tags(instance), instance["InstanceId"]
            if not launched_with_profile(instance, settings.instance_profile):
                log.info(f"ignored {instance_id} in {region}: our tags but not our instance profile")
                continue
            reason = _why_orphaned(github, instance, tags, now, limits, report)
            if reason is None:
                live_run_keys.add(naming.run_key_of_runner(tags.get("Name", "")) or "")
                report.kept.append(instance_id)
                continue
            try:
                ec2.terminate(client, instance_id)
            except ClientError as error:
                if ec2.error_code(error) != "UnauthorizedOperation":
                    raise
                # The roles may end only instances of this stack's instance profile (setup/gpu-runner.yaml): a look-alike with
                # copied tags is refused, and must not stop the rest of the sweep.
                log.info(
                    f"kept {instance_id} in {region}: AWS refused to end it (not this stack's instance?)"
                )
                report.kept.append(instance_id)
                continue
            report.terminated.append(instance_id)
            log.info(f"terminated {instance_id} in {region}: {reason}")

    ssm_client = aws.client("ssm", settings.region)
    fresh_parameter_keys: set[str] = set()
    for meta in ssm.list_parameters(ssm_client, settings.ssm_prefix):
        if now - meta["LastModifiedDate"] > grace:
            ssm.delete_parameter(ssm_client, meta["Name"])
            report.parameters_deleted.append(meta["Name"])
            log.info(f"deleted parameter {meta['Name']}: older than {settings.reap_grace_minutes} min")
        else:
            fresh_parameter_keys.add(naming.run_key_of_parameter(meta["Name"]))

    for runner in github.list_runners() if github is not None else []:
        key = naming.run_key_of_runner(runner.name)
        # A runner of a launch in progress is offline with a fresh parameter and maybe no instance yet.
        if key is None or runner.status != "offline" or runner.busy:
            continue
        if key in live_run_keys or key in fresh_parameter_keys:
            continue
        if github.delete_runner(runner.id):
            report.runners_deleted.append(runner.name)
            log.info(f"deleted offline runner {runner.name} (id {runner.id})")
    log.info(
        f"reaper: {len(report.terminated)} instance(s) terminated, {len(report.runners_deleted)} runner(s) and "
        f"{len(report.parameters_deleted)} parameter(s) deleted, {len(report.kept)} instance(s) healthy"
    )
    return report
