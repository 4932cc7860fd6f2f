"""launch, wait and teardown: the three steps of train.yml's `start` and `stop` jobs.

Ordering rules that keep a paid GPU from being left behind:
- nothing is created before the inputs are known to be good (AMI resolved, settings valid);
- every id is written to the step outputs the moment it exists, so `stop` can clean up after a crashed `launch`;
- when `launch` fails after the JIT config exists, it deletes the runner registration, the parameter and any
  instance itself before exiting non-zero;
- teardown terminates the instance even when GitHub is failing, and is safe to run twice.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from . import cost, ec2, naming, offerings, parameters
from .aws import Aws
from .bootstrap import render_user_data
from .errors import LaunchBlockedError, RegistrationTimeout, RunnerError
from .github import GitHubRunners, Runner
from .outputs import append_summary, write_outputs
from .settings import Settings

Log = Callable[[str], None]
# The instance must outlive its own max-lifetime shutdown a little before the reaper calls it expired.
EXPIRY_MARGIN = timedelta(minutes=10)
MINIMUM_BILLED_SECONDS = 60


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
    label = naming.runner_label(ctx)
    raw = {
        "Name": naming.runner_name(ctx),
        naming.MANAGED_BY_KEY: naming.MANAGED_BY_VALUE,
        naming.TAG_PROJECT: settings.project,
        naming.TAG_REPOSITORY: ctx.repository,
        naming.TAG_RUN_ID: ctx.run_id,
        naming.TAG_RUN_ATTEMPT: ctx.run_attempt,
        naming.TAG_BRANCH: ctx.branch,
        naming.TAG_COMMIT: ctx.commit,
        naming.TAG_LABEL: label,
        naming.TAG_RUNNER_ID: str(runner_id),
        naming.TAG_EXPIRES_AT: expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return {key: naming.tag_value(value) for key, value in raw.items()}


def launch(
    settings: Settings,
    ctx: naming.RunContext,
    aws: Aws,
    github: GitHubRunners,
    *,
    use_spot: bool | None = None,
    now: datetime | None = None,
    log: Log = print,
) -> LaunchOutcome:
    region = settings.region
    ec2_client, ssm = aws.client("ec2", region), aws.client("ssm", region)
    now = now or datetime.now(UTC)
    ami_id, root_device = ec2.resolve_ami(
        ssm, ec2_client, ami_id=settings.ami_id, ami_parameter=settings.ami_parameter, region=region
    )
    # Before anything exists: a type EC2 does not offer there is skipped, none offered fails here.
    try:
        offered = offerings.check(
            ec2_client,
            region=region,
            instance_types=settings.instance_types,
            subnet_ids=settings.subnet_ids,
            log=log,
        )
    except ClientError as error:  # an unknown subnet, a missing permission: the same hints as RunInstances
        raise LaunchBlockedError(ec2.explain(error, region)) from None
    name, label = naming.runner_name(ctx), naming.runner_label(ctx)
    parameter = naming.parameter_name(settings.ssm_prefix, ctx)
    expires_at = now + timedelta(minutes=settings.max_runtime_minutes) + EXPIRY_MARGIN

    jit = github.create_jit_config(name, [label])
    runner_id = jit.runner.id
    log(f"registered just-in-time runner {name} (id {runner_id}, label {label})")
    launched: ec2.Launched | None = None
    try:
        write_outputs(
            {"runner-id": str(runner_id), "runner-name": name, "label": label, "parameter": parameter}
        )
        tags = instance_tags(settings, ctx, runner_id=runner_id, expires_at=expires_at)
        parameters.put_jit_config(ssm, parameter, jit.encoded_jit_config, tags)
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
            log=log,
        )
        log(
            f"launched {launched.instance_id}: {launched.market} {launched.instance_type} "
            f"in {launched.availability_zone or region}"
        )
        write_outputs(
            {
                "instance-id": launched.instance_id,
                "region": region,
                "instance-type": launched.instance_type,
                "market": launched.market,
                "availability-zone": launched.availability_zone,
            }
        )
    except BaseException:
        # BaseException: a cancelled workflow (SIGTERM -> SystemExit) must clean up too.
        log("launch failed: removing what it created")
        _undo_launch(aws, github, region, runner_id, parameter, launched, log)
        raise
    return LaunchOutcome(runner_id, name, label, parameter, region, launched)


def _undo_launch(
    aws: Aws, github: GitHubRunners, region: str, runner_id: int, parameter: str, launched: Any, log: Log
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
            lambda: parameters.delete_parameter(aws.client("ssm", region), parameter),
        ),
    ]
    for what, step in steps:
        try:
            step()
            log(f"cleanup: {what}: done")
        except Exception as error:  # keep going: every step removes something that costs or leaks
            log(f"cleanup: {what} FAILED ({error}); the scheduled reaper will retry")


def wait(
    settings: Settings,
    aws: Aws,
    github: GitHubRunners,
    *,
    region: str,
    instance_id: str,
    runner_id: int,
    timeout_seconds: float | None = None,
    log: Log = print,
) -> Runner:
    """Poll until the runner is online; fail fast when the instance dies; print its console on failure."""
    ec2_client = aws.client("ec2", region)
    timeout = settings.wait_timeout_seconds if timeout_seconds is None else timeout_seconds

    def on_poll(elapsed: float, runner: Runner | None) -> None:
        status = runner.status if runner else "not registered yet"
        log(f"[{elapsed:5.0f} s] runner {runner_id}: {status}")
        instance = ec2.describe(ec2_client, instance_id)
        state = instance["State"]["Name"] if instance else "gone"
        if state in {"shutting-down", "terminated", "stopping", "stopped", "gone"}:
            reason = (instance or {}).get("StateReason", {}).get("Message", "")
            raise RunnerError(f"instance {instance_id} is {state} ({reason}) before its runner came online")

    started = time.monotonic()
    try:
        runner = github.wait_until_online(runner_id, timeout, on_poll)
    except (RegistrationTimeout, RunnerError):
        log(f"--- console output of {instance_id} ---")
        log(ec2.console_output(ec2_client, instance_id) or "(empty: the instance has not written any yet)")
        log("--- end of console output ---")
        raise
    log(f"runner {runner.name} online after {time.monotonic() - started:.0f} s")
    return runner


_TRANSITION_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) GMT\)")


def billed_seconds(instance: dict[str, Any], now: datetime) -> int:
    """Per-second billing from launch to termination (or now), with EC2's 60-second minimum."""
    launched: datetime = instance["LaunchTime"]
    end = now
    if instance["State"]["Name"] == "terminated":
        match = _TRANSITION_TIME.search(instance.get("StateTransitionReason", ""))
        if match:
            end = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return max(MINIMUM_BILLED_SECONDS, math.ceil((end - launched).total_seconds()))


@dataclass(frozen=True)
class TeardownReport:
    runner: str
    instance: str
    parameter: str
    billed_seconds: int | None
    cost: cost.Cost | None = None


@dataclass(frozen=True)
class CostRequest:
    """Teardown prices the instance it terminated and logs that to the training run (the CLI always asks)."""

    volume_gb: int  # the root volume launch created (settings.root_volume_gb)
    mlflow_run_id: str = ""
    attempt: int | None = 1  # None: not a number (a hand-made dispatch input): not logged to MLflow
    env: Mapping[str, str] | None = None  # MLFLOW_* and GITHUB_STEP_SUMMARY; default os.environ


def _delete_runner(github: GitHubRunners, runner_id: int) -> str:
    return "deleted" if github.delete_runner(runner_id) else "already gone"


def _terminate(aws: Aws, region: str, instance_id: str) -> tuple[str, dict[str, Any] | None]:
    """The state after terminating, and the instance as described afterwards (None when already gone)."""
    client = aws.client("ec2", region)
    if ec2.describe(client, instance_id) is None:
        return "already gone", None
    state = ec2.terminate(client, instance_id)
    return state, ec2.describe(client, instance_id)


def _account_cost(
    aws: Aws, region: str, instance: dict[str, Any], billed: int, request: CostRequest, log: Log
) -> cost.Cost | None:
    """Price the attempt, log it to MLflow and the job summary. Never raises: the instance is already gone."""
    env = os.environ if request.env is None else request.env
    try:
        estimate = cost.estimate(
            aws, instance, region=region, billed_seconds=billed, volume_gb=request.volume_gb, log=log
        )
        overhead = None
        if request.attempt is None:
            log("warning: cost not logged to MLflow: --attempt is not a number")
        else:
            overhead = cost.log_to_mlflow(
                estimate, run_id=request.mlflow_run_id, attempt=request.attempt, env=env, log=log
            )
        line = cost.summary_line(estimate, attempt=request.attempt or 0, overhead=overhead)
    except Exception as error:  # an estimate is not worth a failed teardown
        log(f"warning: cost not computed: {type(error).__name__}: {error}")
        return None
    log(line)
    append_summary(line, env)
    return estimate


def _delete_parameter(aws: Aws, region: str, parameter: str) -> str:
    return "deleted" if parameters.delete_parameter(aws.client("ssm", region), parameter) else "already gone"


def teardown(
    aws: Aws,
    github: GitHubRunners,
    *,
    region: str,
    instance_id: str = "",
    runner_id: int | None = None,
    parameter: str = "",
    cost_request: CostRequest | None = None,
    now: datetime | None = None,
    log: Log = print,
) -> TeardownReport:
    """Idempotent: deregister, terminate, delete the parameter; each step runs even when another one failed.
    With a cost request, then price the terminated instance and log it (never failing the teardown)."""
    now = now or datetime.now(UTC)
    problems: dict[str, str] = {}
    states = {"runner": "not given", "instance": "not given", "parameter": "not given"}
    billed: int | None = None
    described: dict[str, Any] | None = None

    def attempt(what: str, step: Callable[[], str]) -> None:
        try:
            states[what] = step()
            problems.pop(what, None)
        except Exception as error:  # never skip the remaining steps: each one removes something
            states[what] = f"FAILED ({error})"
            problems[what] = str(error)

    if runner_id is not None:
        attempt("runner", lambda: _delete_runner(github, runner_id))
    if instance_id:

        def terminate_step() -> str:
            nonlocal billed, described
            state, described = _terminate(aws, region, instance_id)
            billed = billed_seconds(described, now) if described else None
            return state

        attempt("instance", terminate_step)
    if parameter:
        attempt("parameter", lambda: _delete_parameter(aws, region, parameter))
    if "runner" in problems and runner_id is not None:
        # A busy runner whose machine is now gone turns offline and can be deleted: one more try.
        attempt("runner", lambda: _delete_runner(github, runner_id))

    report = TeardownReport(states["runner"], states["instance"], states["parameter"], billed)
    log(
        f"runner {runner_id}: {report.runner}; instance {instance_id or '-'}: {report.instance}; "
        f"parameter {parameter or '-'}: {report.parameter}"
    )
    if billed is not None:
        log(f"billed seconds: {billed}")
    if cost_request is not None and described is not None and billed is not None:
        report = replace(report, cost=_account_cost(aws, region, described, billed, cost_request, log))
    elif cost_request is not None:
        log("no cost recorded: no instance was terminated by this teardown (none given, or already gone)")
    if problems:
        raise RunnerError(
            "teardown incomplete (the scheduled reaper retries): "
            + "; ".join(f"{what}: {why}" for what, why in problems.items())
        )
    return report
