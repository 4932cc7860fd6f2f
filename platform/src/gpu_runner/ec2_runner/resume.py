"""After a spot interruption: start the next attempt of the training, or give up, from the stop job.

An attempt was interrupted when its train step exited with 75 (the training saw the two-minute notice and
checkpointed) or when EC2 says the instance ended for a spot reclaim (the job died with the machine before it
could report). The next attempt trains the same commit and config, so it finds the checkpoint in S3 and continues
the same MLflow run. After `on_demand_after_interruptions` interrupted attempts the next one goes on-demand
(a circuit breaker: a pool that keeps reclaiming would otherwise eat every attempt); after `max_attempts` it stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import ec2

log = logging.getLogger(__name__)

SPOT_RECLAIM = "Server.SpotInstanceTermination"
WORKFLOW = "train.yml"
# What the stop job does after an interruption (gpu-runner-stop.yml's `resume` input, `resume --mode`): dispatch
# the next attempt of train.yml, or nothing (a sweep: its collect job resumes the trial in the next wave).
MODES = ("dispatch", "none")


@dataclass(frozen=True)
class NextAttempt:
    interrupted: bool
    reason: str
    next_inputs: dict[str, str] | None  # None: no next attempt


def interruption_reason(train_interrupted: bool, instance: Mapping | None) -> str:
    """Why this attempt counts as interrupted, or "" when it does not."""
    if train_interrupted:
        return "the training stopped on the spot interruption notice (exit status 75)"
    code = ((instance or {}).get("StateReason") or {}).get("Code", "")
    if code == SPOT_RECLAIM:
        return f"EC2 reclaimed the spot instance ({code})"
    return ""


def decide(
    settings: Settings,
    *,
    attempt: int,
    reason: str,
    commit: str,
    config: str,
    instance_type: str = "",
) -> NextAttempt:
    if not reason:
        return NextAttempt(False, "not interrupted", None)
    if attempt >= settings.max_attempts:
        return NextAttempt(True, f"{reason}; attempt {attempt} of {settings.max_attempts}: giving up", None)
    spot = "false" if attempt >= settings.on_demand_after_interruptions else "default"
    inputs = {"attempt": str(attempt + 1), "commit": commit, "config": config, "spot": spot}
    if instance_type:
        inputs["instance-type"] = instance_type
    market = "on-demand (circuit breaker)" if spot == "false" else "spot first, as configured"
    return NextAttempt(
        True, f"{reason}; starting attempt {attempt + 1} of {settings.max_attempts} on {market}", inputs
    )


def resume(
    settings: Settings,
    aws: Aws,
    dispatch: Callable[[str, Mapping[str, str]], None],
    *,
    ref: str,
    attempt: int,
    train_interrupted: bool,
    region: str = "",
    instance_id: str = "",
    commit: str,
    config: str,
    instance_type: str = "",
    mode: str = "dispatch",
) -> NextAttempt:
    """`mode` "none": the decision is logged and returned, nothing is dispatched and giving up is not an error
    (whoever asked for "none" resumes, or not)."""
    if mode not in MODES:
        raise RunnerError(f"--mode: {mode!r} is not one of {', '.join(MODES)}")
    instance = (
        ec2.describe(aws.client("ec2", region or settings.region), instance_id) if instance_id else None
    )
    reason = interruption_reason(train_interrupted, instance)
    if mode == "none":
        decision = NextAttempt(bool(reason), reason or "not interrupted", None)
        told = f"; not dispatching {WORKFLOW} (resume mode none: the caller resumes it)" if reason else ""
        log.info(f"attempt {attempt}: {decision.reason}{told}")
        return decision
    decision = decide(
        settings,
        attempt=attempt,
        reason=reason,
        commit=commit,
        config=config,
        instance_type=instance_type,
    )
    log.info(f"attempt {attempt}: {decision.reason}")
    if decision.next_inputs is not None:
        dispatch(ref, decision.next_inputs)
        log.info(f"dispatched {WORKFLOW} on {ref} with {decision.next_inputs}")
    elif decision.interrupted:
        raise RunnerError(
            f"training interrupted {attempt} time(s); max_attempts ({settings.max_attempts}) reached"
        )
    return decision
