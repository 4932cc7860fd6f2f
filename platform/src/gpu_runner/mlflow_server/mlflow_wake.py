"""`gpu-runner mlflow-server wake`: the start job's step before a GPU launch. When the project has a team MLflow
server (gpu_runner/mlflow_server/mlflow-server.yaml) and its stop schedule stopped it, start it and wait until MLflow answers, so no
GPU is billed while the tracking server boots. No server: nothing to do.

The start job runs on a GitHub-hosted runner, outside the VPC: it cannot ask MLflow itself. The server marks
itself ready on every boot (its mlflow-ready unit writes the ready parameter once /health answers), and the
parameter's LastModifiedDate, set by SSM, says whether the mark is from this boot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from gpu_runner.core.errors import RunnerError

log = logging.getLogger(__name__)

# The server's own tag key (gpu_runner/mlflow_server/mlflow-server.yaml): never gpu-runner:managed-by, so the reaper and the train
# role's terminate grant never match it.
PROJECT_TAG = "mlflow-server:project"
READY_SUFFIX = "-mlflow-ready"
# Instance states that can become `running` (EC2 User Guide, "Amazon EC2 instance state changes").
ALIVE_STATES = ("pending", "running", "stopping", "stopped")
# A first boot installs MLflow with pip (about 2 minutes on a t3.small); a later start takes well under one.
DEFAULT_TIMEOUT_SECONDS = 600.0
# The start request is timed by this machine's clock, the mark by SSM's: a GitHub-hosted runner keeps NTP time,
# and a server stopped by its schedule wrote its last mark long before it stopped.
CLOCK_MARGIN = timedelta(seconds=30)


class MlflowServerError(RunnerError):
    """The team MLflow server could not be started or did not become ready; no GPU was launched."""


@dataclass(frozen=True)
class Server:
    instance_id: str
    state: str
    launch_time: datetime


def ready_parameter(ssm_prefix: str) -> str:
    return f"{ssm_prefix}{READY_SUFFIX}"


def find_server(ec2: Any, project: str) -> Server | None:
    """The project's server instance, or None. Two would be a mistake (one stack per project): refused."""
    filters = [
        {"Name": f"tag:{PROJECT_TAG}", "Values": [project]},
        {"Name": "instance-state-name", "Values": list(ALIVE_STATES)},
    ]
    found = [
        instance
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    ]
    if len(found) > 1:
        ids = ", ".join(sorted(i["InstanceId"] for i in found))
        raise MlflowServerError(
            f"{len(found)} instances carry {PROJECT_TAG}={project} ({ids}): keep one MLflow server stack per "
            "project (make mlflow-server-down removes the stack's; terminate any other by hand)"
        )
    if not found:
        return None
    instance = found[0]
    return Server(instance["InstanceId"], instance["State"]["Name"], instance["LaunchTime"])


def _ready_mark(ssm: Any, name: str) -> tuple[str, datetime] | None:
    try:
        parameter = ssm.get_parameter(Name=name)["Parameter"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return None
        raise
    return parameter["Value"], parameter["LastModifiedDate"]


def wake(
    ec2: Any,
    ssm: Any,
    *,
    project: str,
    ssm_prefix: str,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    poll_seconds: float = 5.0,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Start the server if it is stopped and wait for its ready mark; returns the tracking URI it wrote, or None
    when the project has no server. Raises MlflowServerError on a timeout (the caller launches no GPU)."""
    server = find_server(ec2, project)
    if server is None:
        log.info(f"no team MLflow server for {project} (MLFLOW_TRACKING_URI is used as set)")
        return None
    # A mark newer than this is from the boot we wait for: the instance's last start, or our own start request.
    fresh_after = server.launch_time
    deadline = time.monotonic() + timeout_seconds
    if server.state == "stopping":
        log.info(f"MLflow server {server.instance_id} is stopping: waiting until it has stopped to start it")
        ec2.get_waiter("instance_stopped").wait(
            InstanceIds=[server.instance_id], WaiterConfig={"Delay": poll_seconds, "MaxAttempts": 60}
        )
        server = Server(server.instance_id, "stopped", server.launch_time)
    if server.state == "stopped":
        log.info(f"starting the MLflow server {server.instance_id} (stopped by its schedule)")
        fresh_after = now() - CLOCK_MARGIN
        ec2.start_instances(InstanceIds=[server.instance_id])
    name = ready_parameter(ssm_prefix)
    while True:
        mark = _ready_mark(ssm, name)
        if mark is not None and mark[1] >= fresh_after:
            log.info(f"MLflow server {server.instance_id} is ready at {mark[0]}")
            return mark[0]
        if time.monotonic() >= deadline:
            raise MlflowServerError(
                f"the MLflow server {server.instance_id} did not mark itself ready ({name}) within "
                f"{timeout_seconds:.0f} s, so no GPU was launched: read its boot log with `aws ec2 "
                f"get-console-output --instance-id {server.instance_id} --latest`, or `make mlflow-tunnel` and "
                "`sudo journalctl -u mlflow -u mlflow-ready` on it"
            )
        sleep(poll_seconds)
