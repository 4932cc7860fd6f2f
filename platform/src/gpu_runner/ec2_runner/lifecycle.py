"""launch, wait and teardown: the three steps of train.yml's `start` and `stop` jobs.

Ordering rules that keep a paid GPU from being left behind:
- nothing is created before the inputs are known to be good (AMI resolved, settings valid);
- every id is written to the step outputs the moment it exists, so `stop` can clean up after a crashed `launch`;
- when `launch` fails after the JIT config exists, it deletes the runner registration, the parameter and any
  instance itself before exiting non-zero;
- teardown terminates the instance even when GitHub is failing, and is safe to run twice.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from gpu_runner.core import naming, offerings, timeline
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import LaunchBlockedError, RegistrationTimeout, RunnerError, SettingsError
from gpu_runner.core.github import GitHubRunners, Runner
from gpu_runner.core.mlflow_rest import MlflowRest
from gpu_runner.core.settings import Settings
from gpu_runner.core.workflow_contract import (
    UNPRINTED,
    LaunchOutput,
    WaitOutput,
    append_summary,
    write_outputs,
)
from gpu_runner.cost import accounting
from gpu_runner.cost.record import TRAINING_SECONDS, Cost, latest_at_step
from gpu_runner.ec2_runner import ec2, live_limit, ownership, ssm
from gpu_runner.ec2_runner.user_data import render_job_started_hook, render_user_data

log = logging.getLogger(__name__)

# The instance must outlive its own max-lifetime shutdown a little before the reaper calls it expired.
EXPIRY_MARGIN = timedelta(minutes=10)
MINIMUM_BILLED_SECONDS = 60
# The states after a terminate or stop call: StateTransitionReason then says when it was asked for.
_ENDING_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


@dataclass(frozen=True)
class LaunchOutcome:
    runner_id: int
    runner_name: str
    label: str
    parameter: str
    region: str
    launched: ec2.Launched


def instance_tags(
    settings: Settings, ctx: naming.RunContext, *, runner_id: int, expires_at: datetime
) -> dict[str, str]:
    # No label tag: the label's nonce stays out of AWS (DescribeInstances is open to more principals than the
    # start job's outputs); the reaper pairs instance and runner through the Name (the run key).
    raw = {
        "Name": naming.runner_name(ctx),
        naming.MANAGED_BY_KEY: naming.MANAGED_BY_VALUE,
        naming.TAG_PROJECT: settings.project,
        naming.TAG_REPOSITORY: ctx.repository,
        naming.TAG_RUN_ID: ctx.run_id,
        naming.TAG_RUN_ATTEMPT: ctx.run_attempt,
        naming.TAG_BRANCH: ctx.branch,
        naming.TAG_COMMIT: ctx.commit,
        naming.TAG_RUNNER_ID: str(runner_id),
        naming.TAG_EXPIRES_AT: expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        # Only for a sweep's trial: train.yml's instances keep exactly today's tags.
        **({naming.TAG_SLOT: ctx.slot} if ctx.slot else {}),
    }
    return {key: naming.tag_value(value) for key, value in raw.items()}


def require_security_group(settings: Settings) -> None:
    """Refuse a launch without security_group_ids, before any API call. Without one EC2 puts the instance in the
    VPC's default security group, whose default rule "grants instances unrestricted network access to each
    other" (EC2 API Reference, CreateSecurityGroup, read 2026-12-01); the train role may use only the stack's
    group anyway (gpu_runner/setup/gpu-runner.yaml LaunchOnlyWithTheStackSecurityGroup)."""
    if not settings.security_group_ids:
        raise SettingsError(
            "security_group_ids: empty, so EC2 would use the VPC's default security group (open to every "
            "instance in it); set security_group_ids: [<RunnerSecurityGroupId of `make bootstrap`>] in "
            "configs/gpu-runner.yaml"
        )


def launch(
    settings: Settings,
    ctx: naming.RunContext,
    aws: Aws,
    github: GitHubRunners,
    *,
    use_spot: bool | None = None,
    now: datetime | None = None,
    label_nonce: str | None = None,
) -> LaunchOutcome:
    """Register the JIT runner, store its config and launch the instance. `label_nonce` is for the offline
    tests only (act maps the runner label before the run starts); otherwise a new random one."""
    require_security_group(settings)
    region = settings.region
    # Before anything exists: the hook needs this run's identity (a missing GITHUB_WORKFLOW_REF fails here).
    hook = render_job_started_hook(ctx)
    ec2_client, ssm_client = aws.client("ec2", region), aws.client("ssm", region)
    now = now or datetime.now(UTC)
    ami_id, root_device = ec2.resolve_ami(
        ssm_client, ec2_client, ami_id=settings.ami_id, ami_parameter=settings.ami_parameter, region=region
    )
    # Before anything exists: a type EC2 does not offer there is skipped, none offered fails here.
    try:
        offered = offerings.check(
            ec2_client,
            region=region,
            instance_types=settings.instance_types,
            subnet_ids=settings.subnet_ids,
        )
    except ClientError as error:  # an unknown subnet, a missing permission: the same hints as RunInstances
        raise LaunchBlockedError(ec2.explain(error, region)) from None
    name = naming.runner_name(ctx)
    label = naming.runner_label(ctx, label_nonce or naming.label_nonce())
    parameter = naming.parameter_name(settings.ssm_prefix, ctx)
    expires_at = now + timedelta(minutes=settings.max_runtime_minutes) + EXPIRY_MARGIN

    # The last look before anything exists: the later the count, the fewer launches can race past the limit.
    live_limit.check(settings, ctx.repository, ec2_client)
    jit = github.create_jit_config(name, [label])
    runner_id = jit.runner.id
    # Not the label: it is the one thing another workflow would need to queue a job for this runner.
    log.info(f"registered just-in-time runner {name} (id {runner_id})")
    launched: ec2.Launched | None = None
    try:
        write_outputs(
            {
                LaunchOutput.RUNNER_ID: str(runner_id),
                LaunchOutput.RUNNER_NAME: name,
                LaunchOutput.LABEL: label,
                LaunchOutput.PARAMETER: parameter,
            },
            unprinted=UNPRINTED,
        )
        tags = instance_tags(settings, ctx, runner_id=runner_id, expires_at=expires_at)
        spec = ec2.LaunchSpec(
            ami_id=ami_id,
            root_device_name=root_device,
            root_volume_gb=settings.root_volume_gb,
            user_data=render_user_data(
                settings,
                region=region,
                parameter_name=parameter,
                runner_name=name,
                expires_at=int(expires_at.timestamp()),
                job_started_hook=hook,
            ),
            tags=tags,
            security_group_ids=settings.security_group_ids,
            instance_profile=settings.instance_profile,
        )
        launched = ec2.launch_instance(
            aws,
            spec,
            region=region,
            instance_types=settings.instance_types,
            subnet_ids=settings.subnet_ids,
            use_spot=settings.use_spot if use_spot is None else use_spot,
            offered=offered.allows,
        )
        log.info(
            f"launched {launched.instance_id}: {launched.market} {launched.instance_type} "
            f"in {launched.availability_zone or region}"
        )
        write_outputs(
            {
                LaunchOutput.INSTANCE_ID: launched.instance_id,
                LaunchOutput.REGION: region,
                LaunchOutput.INSTANCE_TYPE: launched.instance_type,
                LaunchOutput.MARKET: launched.market,
                LaunchOutput.AVAILABILITY_ZONE: launched.availability_zone,
                LaunchOutput.BUCKET: settings.bucket,
            }
        )
        # After RunInstances: only now is the instance's ARN known, and the parameter is created tagged with it
        # in one request, so no other instance's role may ever read it. The boot script retries until it exists.
        # A failure here ends in the except below: instance terminated, runner deleted, no parameter left.
        owner_tags = {**tags, naming.TAG_INSTANCE_ARN: _instance_arn(aws, region, launched)}
        ssm.put_jit_config(
            ssm_client,
            parameter,
            jit.encoded_jit_config,
            owner_tags,
            key_id=naming.jit_config_key_alias(settings.ssm_prefix),
        )
    except BaseException:
        # BaseException: a cancelled workflow (SIGTERM -> SystemExit) must clean up too.
        log.info("launch failed: removing what it created")
        _undo_launch(aws, github, region, runner_id, parameter, launched)
        raise
    return LaunchOutcome(runner_id, name, label, parameter, region, launched)


def _instance_arn(aws: Aws, region: str, launched: ec2.Launched) -> str:
    if not launched.owner_id:
        raise RunnerError(f"RunInstances named no account (OwnerId) for {launched.instance_id}")
    partition = aws.session.get_partition_for_region(region)
    return naming.instance_arn(partition, region, launched.owner_id, launched.instance_id)


def _undo_launch(
    aws: Aws, github: GitHubRunners, region: str, runner_id: int, parameter: str, launched: Any
) -> None:
    steps: list[tuple[str, Callable[[], object]]] = []
    if launched is not None:
        steps.append(
            (
                f"terminate {launched.instance_id}",
                lambda: ec2.terminate(aws.client("ec2", region), launched.instance_id),
            )
        )
    steps += [
        (f"delete runner {runner_id}", lambda: github.delete_runner(runner_id)),
        (
            f"delete parameter {parameter}",
            lambda: ssm.delete_parameter(aws.client("ssm", region), parameter),
        ),
    ]
    for what, step in steps:
        try:
            step()
            log.info(f"cleanup: {what}: done")
        except Exception as error:  # keep going: every step removes something that costs or leaks
            log.warning(f"cleanup: {what} FAILED ({error}); the scheduled reaper will retry")


# Between "is the runner online?" polls once the instance runs. Every second between the runner connecting and
# `wait` noticing is billed GPU time before the train job can be scheduled, so the interval is short and fixed
# (a backoff capped at 15 s noticed it up to 15 s late). Rate limit: GitHub gives a PAT or an App installation
# token 5,000 requests per hour ("Rate limits for the REST API", docs.github.com, read 2026-12-01); one wait
# costs at most wait_timeout_seconds / 3 + 1 requests (201 with the default 600 s), 4% of that budget.
POLL_INTERVAL_SECONDS = 3.0
# The boot script's console line when the job-started hook refused a job (user_data.sh, refusal_watch).
RUNNER_TAKEN_MARK = "REFUSED a job (runner was taken)"
_DEAD_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped", "gone"})


@dataclass(frozen=True)
class Online:
    """The runner `wait` saw online, and when (the timeline's "runner online" phase)."""

    runner: Runner
    online_at: datetime  # when wait noticed it (at most POLL_INTERVAL_SECONDS after it connected)
    seconds_after_launch: float  # online_at - the instance's LaunchTime


def wait(
    settings: Settings,
    aws: Aws,
    github: GitHubRunners,
    *,
    region: str,
    instance_id: str,
    runner_id: int,
    timeout_seconds: float | None = None,
    runner_name: str = "",
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Online:
    """Poll until the runner is online; fail fast when the instance dies; print its console on failure.

    GitHub is asked only once the instance is running (before that the runner cannot have connected), then
    every POLL_INTERVAL_SECONDS. Writes runner-online-at (epoch seconds) and runner-online-seconds (after
    launch) to the step outputs, for the stop job's timeline. With `runner_name` (the CLI passes this run's,
    attempt's and slot's), a runner of another name fails at once: a sweep leg given another leg's runner id
    must not report that one online."""
    ec2_client = aws.client("ec2", region)
    timeout = settings.wait_timeout_seconds if timeout_seconds is None else timeout_seconds
    started = clock()
    seen = "instance not running yet"
    try:
        while True:
            instance = _alive(ec2_client, instance_id)
            elapsed = clock() - started
            status = f"instance {instance['State']['Name']}"
            if instance["State"]["Name"] == "running":
                runner = github.get_runner(runner_id)
                status = f"runner {runner.status}" if runner else "runner not registered (deleted?)"
                if runner is not None and runner_name and runner.name != runner_name:
                    raise RunnerError(
                        f"runner {runner_id} is {runner.name}, not {runner_name}: pass the wait step the "
                        "runner-id its own launch step wrote (and the same --slot)"
                    )
                if runner is not None and runner.busy:
                    # This run's train job cannot hold it yet (it needs this start job): another job does.
                    raise RunnerError(
                        _taken(runner_id, "it is busy with a job while this start job still waits")
                    )
                if runner is not None and runner.status == "online":
                    return _online(runner, instance, elapsed)
            if status != seen:  # one line per change, not one per poll
                log.info(f"[{elapsed:5.0f} s] runner {runner_id}: {status}")
                seen = status
            remaining = timeout - elapsed
            if remaining <= 0:
                raise RegistrationTimeout(
                    f"runner {runner_id} did not come online within {timeout:.0f} s (last seen: {seen}). Check "
                    "the instance's console output: the runner download, the JIT config hand-over or the network "
                    "may have failed."
                )
            sleep(min(POLL_INTERVAL_SECONDS, remaining))
    except (RegistrationTimeout, RunnerError) as error:
        console = ec2.console_output(ec2_client, instance_id)
        log.info(f"--- console output of {instance_id} ---")
        log.info(console or "(empty: the instance has not written any yet)")
        log.info("--- end of console output ---")
        if RUNNER_TAKEN_MARK in console:
            raise RunnerError(_taken(runner_id, "the instance's job-started hook refused a job")) from None
        # After a timeout the last poll already answered; after the instance died, ask once.
        if (
            seen == "runner not registered (deleted?)"
            if isinstance(error, RegistrationTimeout)
            else github.get_runner(runner_id) is None
        ):
            # A just-in-time runner is removed by GitHub after its one job; this run never deleted it.
            raise RunnerError(_taken(runner_id, "its registration is gone before this run used it")) from None
        raise


def _taken(runner_id: int, evidence: str) -> str:
    return (
        f"runner was taken: another workflow's job reached runner {runner_id} before this run's train job "
        f"({evidence}). The job-started hook fails any such job before its first step and halts the instance; "
        "the stop job removes the rest. Check the repository's workflow runs for the job that named this "
        "run's label (public repositories: require approval for all outside contributors), then push again."
    )


def _alive(ec2_client: Any, instance_id: str) -> dict[str, Any]:
    """The instance as EC2 describes it; RunnerError when it is already going away (fail fast, not at timeout)."""
    instance = ec2.describe(ec2_client, instance_id)
    state = instance["State"]["Name"] if instance else "gone"
    if instance is None or state in _DEAD_STATES:
        reason = (instance or {}).get("StateReason", {}).get("Message", "")
        raise RunnerError(f"instance {instance_id} is {state} ({reason}) before its runner came online")
    return instance


def _online(runner: Runner, instance: Mapping[str, Any], waited: float) -> Online:
    online_at = datetime.now(UTC)
    after_launch = max(0.0, (online_at - instance["LaunchTime"]).total_seconds())
    log.info(
        f"runner {runner.name} online {after_launch:.0f} s after launch (waited {waited:.0f} s, "
        f"polling every {POLL_INTERVAL_SECONDS:.0f} s)"
    )
    write_outputs(
        {
            WaitOutput.RUNNER_ONLINE_AT: f"{online_at.timestamp():.0f}",
            WaitOutput.RUNNER_ONLINE_SECONDS: f"{after_launch:.0f}",
        }
    )
    return Online(runner, online_at, after_launch)


# EC2 puts the time of a user-initiated stop or termination into StateTransitionReason, in GMT:
# "User initiated (2018-06-26 07:19:42 GMT)" (real `aws ec2 describe-instances` output; the EC2 API reference,
# Instance.StateTransitionReason, only says "The reason for the most recent state transition. This might be an
# empty string"). moto writes UTC instead (getmoto/moto#7486 and moto/ec2/models/instances.py): both mean UTC+0.
_TRANSITION_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


def transition_time(instance: Mapping[str, Any]) -> datetime | None:
    """When EC2 says the instance was stopped or terminated, or None when the reason carries no time."""
    match = _TRANSITION_TIME.search(str(instance.get("StateTransitionReason") or ""))
    if match is None:
        return None
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def billed_seconds(instance: Mapping[str, Any], now: datetime) -> int:
    """Per-second billing from launch to termination, with EC2's 60-second minimum.

    The end is EC2's own termination time; when the reason carries none (still running, or a form we cannot
    read), it is `now`: never less than launch-to-now, so an unreadable reason cannot shrink the bill."""
    launched: datetime = instance["LaunchTime"]
    end = transition_time(instance) if instance["State"]["Name"] in _ENDING_STATES else None
    if end is None:
        if instance["State"]["Name"] in _ENDING_STATES:
            reason = instance.get("StateTransitionReason") or "(empty)"
            log.info(f"termination time not readable from {reason!r}: billed up to now")
        end = now
    return max(MINIMUM_BILLED_SECONDS, math.ceil((end - launched).total_seconds()))


@dataclass(frozen=True)
class TeardownReport:
    runner: str
    instance: str
    parameter: str
    billed_seconds: int | None
    cost: Cost | None = None
    # The claimed ids that are not this run's (which, and why): left alone (ownership.py).
    refused: tuple[str, ...] = ()


@dataclass(frozen=True)
class CostRequest:
    """Teardown prices the instance it terminated and logs that to the training run (the CLI always asks)."""

    volume_gb: int  # the root volume launch created (settings.root_volume_gb)
    mlflow_run_id: str = ""
    attempt: int | None = 1  # None: not a number (a hand-made dispatch input): not logged to MLflow
    env: Mapping[str, str] | None = None  # MLFLOW_* and GITHUB_STEP_SUMMARY; default os.environ
    # The workflow's moments of this attempt (timeline.WORKFLOW_PHASES -> epoch seconds).
    phases: Mapping[str, float] = field(default_factory=dict)
    slot: str = ""  # a sweep's trial (naming.SLOT): named in the summary lines, so parallel legs read apart


def _delete_runner(github: GitHubRunners, runner_id: int) -> str:
    return "deleted" if github.delete_runner(runner_id) else "already gone"


def _terminate(aws: Aws, region: str, instance_id: str) -> tuple[str, dict[str, Any] | None]:
    """The state after terminating, and the instance as described afterwards (None when already gone)."""
    client = aws.client("ec2", region)
    before = ec2.describe(client, instance_id)
    if before is None:
        return "already gone", None
    # A re-run: nothing to end, but still priced from EC2's record.
    if before["State"]["Name"] == "terminated":
        return "already gone", before
    state = ec2.terminate(client, instance_id)
    return state, ec2.describe(client, instance_id)


def _account_cost(
    aws: Aws, region: str, instance: dict[str, Any], billed: int, request: CostRequest
) -> Cost | None:
    """Price the attempt, log it to MLflow and the job summary. Never raises: the instance is already gone."""
    env = os.environ if request.env is None else request.env
    try:
        estimate = accounting.estimate(
            aws, instance, region=region, billed_seconds=billed, volume_gb=request.volume_gb
        )
        overhead = None
        if request.attempt is None:
            log.warning("warning: cost not logged to MLflow: --attempt is not an attempt number")
        else:
            overhead = accounting.log_to_mlflow(
                estimate, run_id=request.mlflow_run_id, attempt=request.attempt, env=env
            )
        line = accounting.summary_line(
            estimate, attempt=request.attempt or 0, overhead=overhead, slot=request.slot
        )
    except Exception as error:  # an estimate is not worth a failed teardown
        log.warning(f"warning: cost not computed: {type(error).__name__}: {error}")
        return None
    log.info(line)
    append_summary(line, env)
    _account_timeline(instance, request, env)
    return estimate


def _account_timeline(instance: Mapping[str, Any], request: CostRequest, env: Mapping[str, str]) -> None:
    """The attempt's phase timeline to MLflow (step = attempt) and the job summary. Never raises."""
    try:
        launched = instance["LaunchTime"].timestamp()
        terminated = (transition_time(instance) or datetime.now(UTC)).timestamp()
        client = MlflowRest.from_env(env)
        record: timeline.Timeline | None = None
        if client is not None and request.mlflow_run_id and request.attempt is not None:
            training = latest_at_step(
                client.metric_history(request.mlflow_run_id, TRAINING_SECONDS), request.attempt
            )
            record = timeline.log_to_mlflow(
                client, request.mlflow_run_id, attempt=request.attempt, launched=launched,
                terminated=terminated, phases=request.phases, training_seconds=training,
            )  # fmt: skip
        if record is None:
            record = timeline.Timeline(launched, terminated, request.phases)
        text = timeline.summary(record, attempt=request.attempt or 0, slot=request.slot)
    except Exception as error:  # a timeline is not worth a failed teardown
        log.warning(f"warning: timeline not recorded: {type(error).__name__}: {error}")
        return
    log.info(text.strip())
    append_summary(text, env)


def _delete_parameter(aws: Aws, region: str, parameter: str) -> str:
    return "deleted" if ssm.delete_parameter(aws.client("ssm", region), parameter) else "already gone"


def _summary(results: list[tuple[str, str]], none: str) -> tuple[str, str]:
    """(what, state) for the report and its log line: `i-1, i-2` and `shutting-down, already gone`, or `-` and
    `none` when this run had none of them."""
    if not results:
        return "-", none
    states = sorted({state for _, state in results})
    return ", ".join(name for name, _ in results), ", ".join(states)


def teardown(
    aws: Aws,
    github: GitHubRunners,
    scope: ownership.RunScope,
    *,
    region: str,
    instance_id: str = "",
    runner_id: int | None = None,
    parameter: str = "",
    cost_request: CostRequest | None = None,
    now: datetime | None = None,
) -> TeardownReport:
    """Idempotent: terminate this run's instances, delete its runner registrations and JIT-config parameters;
    each step runs even when another one failed. With a cost request, then price the terminated instance and log
    it (never failing the teardown).

    What it ends, it finds through the run key of `scope` (the calling run's: ownership.py), never through the
    ids it is given: those are claims. A claimed id of another run, repository, slot or attempt is refused
    (TeardownReport.refused says which and why) and left alone, and does not keep this run's own resources from
    being torn down; a missing id does not either (a launch killed right after RunInstances wrote none).

    Terminate first: it ends the bill and any job on the instance. Deregistering first kept a GPU billing while
    GitHub was slow (13 s longer when every DELETE answered 503, 271 s longer while a busy runner answered 422
    until busy_timeout_seconds, measured beside machulav/ec2-github-runner, which terminates first). Once its
    machine is gone a busy runner goes offline, so the delete's 422 retries end by themselves.
    `now` (tests): the time the termination is billed up to when EC2's own termination time is unreadable."""
    problems: dict[str, str] = {}
    refused: list[str] = []
    shown = {
        "runner": ("-", "not looked up"),
        "instance": ("-", "not looked up"),
        "parameter": ("-", "not looked up"),
    }
    # The attempts whose JIT-config parameter may be left: this one, and those of the resources found.
    attempts = {scope.attempt}
    priced: dict[str, Any] | None = None
    priced_at = now

    def attempt(what: str, step: Callable[[], tuple[str, str]]) -> None:
        try:
            shown[what] = step()
        except Exception as error:  # never skip the remaining steps: each one removes something
            shown[what] = (shown[what][0], f"FAILED ({error})")
            problems[what] = str(error)

    def instances_step() -> tuple[str, str]:
        nonlocal priced, priced_at
        found = ownership.instances(aws.client("ec2", region), scope, instance_id)
        if found.refusal:
            refused.append(f"--instance-id={instance_id}: {found.refusal}; not terminated")
        results = []
        for instance in found.own:
            attempts.add(int(ownership.tags_of(instance)[naming.TAG_RUN_ATTEMPT]))
            state, described = _terminate(aws, region, instance["InstanceId"])
            results.append((instance["InstanceId"], state))
            # The claimed one is this attempt's; without a claim, the only one found.
            if described and (instance["InstanceId"] == instance_id or len(found.own) == 1):
                # Taken after the terminate call: a fallback end time never bills less than launch-to-now.
                priced, priced_at = described, now or datetime.now(UTC)
        return _summary(results, "none found")

    def runners_step() -> tuple[str, str]:
        found = ownership.runners(github, scope, runner_id)
        if found.refusal:
            refused.append(f"--runner-id={runner_id}: {found.refusal}; not deleted")
        results = []
        for runner in found.own:
            attempts.add(scope.runner_attempt(runner.name) or scope.attempt)
            results.append((str(runner.id), _delete_runner(github, runner.id)))
        return _summary(results, "already gone")

    def parameters_step() -> tuple[str, str]:
        if parameter and (why := scope.parameter_refusal(parameter)):
            refused.append(f"--parameter={parameter}: {why}; not deleted")
        elif parameter:
            attempts.add(scope.parameter_attempt(parameter) or scope.attempt)
        deleted = [
            (name, _delete_parameter(aws, region, name)) for name in map(scope.parameter, sorted(attempts))
        ]
        state = "deleted" if any(result == "deleted" for _, result in deleted) else "already gone"
        return ", ".join(name for name, _ in deleted), state

    attempt("instance", instances_step)
    attempt("runner", runners_step)
    attempt("parameter", parameters_step)

    billed = billed_seconds(priced, priced_at) if priced and priced_at else None
    report = TeardownReport(
        shown["runner"][1], shown["instance"][1], shown["parameter"][1], billed, refused=tuple(refused)
    )
    log.info(
        f"{scope.describe()}: runner {shown['runner'][0]}: {report.runner}; instance {shown['instance'][0]}: "
        f"{report.instance}; parameter {shown['parameter'][0]}: {report.parameter}"
    )
    if billed is not None:
        log.info(f"billed seconds: {billed}")
    if cost_request is not None and priced is not None and billed is not None:
        report = replace(report, cost=_account_cost(aws, region, priced, billed, cost_request))
    elif cost_request is not None:
        log.info(
            "no cost recorded: this run had no instance for this teardown to end (none left, or none found)"
        )
    if problems:
        raise RunnerError(
            "teardown incomplete (the scheduled reaper retries): "
            + "; ".join(f"{what}: {why}" for what, why in problems.items())
            + "".join(f"; refused {each}" for each in refused)
        )
    return report
