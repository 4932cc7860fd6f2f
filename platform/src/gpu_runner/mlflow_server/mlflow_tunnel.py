"""`gpu-runner mlflow-server connect`: the SSM tunnel of a job on a GitHub-hosted runner to the team MLflow server.

The server admits the GPU runners' security group only; the stop job's cost logging, the pull-request comment,
sweep.yml's plan and collect, promote.yml and predict.yml run outside the VPC. This opens a Session Manager port
forwarding session through the stack's own document (port 5000 fixed), in the background for the rest of the job,
and waits until MLflow answers through it. The caller points MLFLOW_TRACKING_URI at the local end.

StartSession is called here with boto3, and its answer handed to AWS's session-manager-plugin exactly as the AWS
CLI hands it (awscli 1.46.3, awscli/customizations/sessionmanager.py, StartSessionCaller: the plugin's arguments
are the name of the environment variable holding the answer, the region, "StartSession", the profile, the request
as JSON and the endpoint URL; the variable form needs plugin 1.2.497.0 or newer). Not through `aws ssm
start-session`: the jobs install the gpu-runner package, which has boto3 and no AWS CLI. GitHub's Ubuntu 24.04
image ships the plugin (actions/runner-images, images/ubuntu/Ubuntu2404-Readme.md, "CLI Tools": AWS CLI Session
Manager Plugin 1.2.694.0 in image 20250202.1.0). The job's end kills the plugin; Session Manager then ends the
session (its idle timeout, 20 minutes unless the account's preferences say otherwise: Systems Manager User Guide,
"Specify an idle session timeout value").
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_runner.core.settings import Settings
from gpu_runner.mlflow_server import mlflow_server, mlflow_wake
from gpu_runner.mlflow_server.mlflow_wake import MlflowServerError

log = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"
DEFAULT_TIMEOUT_SECONDS = 120.0
# The tracking server's liveness endpoint (MLflow's `mlflow server` serves GET /health, "OK"); any HTTP answer,
# a 401 of basic auth included, proves the tunnel reaches MLflow.
HEALTH_PATH = "/health"
LOG_TAIL_CHARS = 2000
RESPONSE_ENV = "AWS_SSM_START_SESSION_RESPONSE"
PLUGIN_MINIMUM = (1, 2, 497, 0)  # the first plugin that reads the answer from RESPONSE_ENV (awscli, as above)


@dataclass(frozen=True)
class Tunnel:
    tracking_uri: str
    pid: int
    instance_id: str


def check_plugin_version() -> None:
    """The plugin is on PATH and reads StartSession's answer from RESPONSE_ENV (1.2.497.0 or newer)."""
    mlflow_server.require_plugin()
    printed = subprocess.run(
        [mlflow_server.PLUGIN, "--version"], capture_output=True, text=True, check=False, timeout=30
    ).stdout.strip()
    try:
        version = tuple(int(part) for part in printed.split("."))
    except ValueError:
        raise MlflowServerError(
            f"{mlflow_server.PLUGIN} --version printed {printed!r}, not a version"
        ) from None
    if version < PLUGIN_MINIMUM:
        raise MlflowServerError(
            f"{mlflow_server.PLUGIN} {printed} is older than 1.2.497.0: install the current one "
            f"({mlflow_server.PLUGIN_DOCS})"
        )


def free_local_port() -> int:
    """A port nobody listens on now (the kernel's pick); the plugin binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOCALHOST, 0))
        return int(probe.getsockname()[1])


def _answers(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, OSError):
        return None


def _tail(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:].strip()
    except FileNotFoundError:
        return ""


def wait_until_mlflow_answers(
    base_url: str, process: subprocess.Popen[bytes], log_file: Path, timeout_seconds: float, poll: float = 0.5
) -> None:
    """Until GET /health answers through the tunnel; the session ending first, or the timeout, is an error with
    the session's own output (a refused StartSession, a plugin that could not bind the port)."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        status = _answers(base_url + HEALTH_PATH)
        if status is not None:
            log.info(f"MLflow answers through the tunnel at {base_url} (GET {HEALTH_PATH}: {status})")
            return
        if process.poll() is not None:
            raise MlflowServerError(
                f"the SSM session to the MLflow server ended (exit {process.returncode}) before MLflow answered "
                f"at {base_url}:\n{_tail(log_file)}"
            )
        if time.monotonic() >= deadline:
            process.kill()
            raise MlflowServerError(
                f"MLflow did not answer through the tunnel at {base_url} within {timeout_seconds:.0f} s (the "
                f"session was ended):\n{_tail(log_file)}"
            )
        time.sleep(poll)


def connect(
    ec2: Any,
    ssm: Any,
    settings: Settings,
    *,
    log_file: Path,
    local_port: int = 0,
    wake: bool = True,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    env: Mapping[str, str] | None = None,
) -> Tunnel:
    """Open the tunnel in the background and return its local tracking URI once MLflow answers through it."""
    server = mlflow_wake.find_server(ec2, settings.project)
    if server is None:
        raise MlflowServerError(
            f"no team MLflow server for {settings.project} in {settings.region}: `make mlflow-server-up`, or "
            "delete the MLFLOW_TUNNEL_ROLE_ARN variable when MLFLOW_TRACKING_URI is reachable without a tunnel"
        )
    if wake:
        mlflow_wake.wake(ec2, ssm, project=settings.project, ssm_prefix=settings.ssm_prefix)
    check_plugin_version()
    port = local_port or free_local_port()
    request = {
        "Target": server.instance_id,
        "DocumentName": mlflow_server.tunnel_document_name(settings.project),
        "Parameters": {"localPortNumber": [str(port)]},
    }
    answer = ssm.start_session(**request)
    session = {key: answer[key] for key in ("SessionId", "TokenValue", "StreamUrl")}
    log.info(f"SSM session {session['SessionId']} to {server.instance_id}:{mlflow_server.PORT}")
    command = [mlflow_server.PLUGIN, RESPONSE_ENV, settings.region, "StartSession", "", json.dumps(request),
               ssm.meta.endpoint_url]  # fmt: skip
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as output:
        # Its own session: the step that started it ends, the tunnel stays for the job's later steps.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**(os.environ if env is None else env), RESPONSE_ENV: json.dumps(session)},
        )
    base_url = f"http://{LOCALHOST}:{port}"
    wait_until_mlflow_answers(base_url, process, log_file, timeout_seconds)
    return Tunnel(base_url, process.pid, server.instance_id)
