"""`gpu-runner mlflow-server up | down | tunnel`: the optional team MLflow server (infra/mlflow-server.yaml).

`up` runs after `bootstrap`: it reads the runner security group, the bucket and the VPC from the gpu-runner stack
(so the two cannot drift), stores the admin and ci passwords in SSM (generated here, never printed), deploys the
stack and prints the GitHub settings. `tunnel` forwards 127.0.0.1:<port> to the server through Session Manager.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import shlex
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from . import stack
from .mlflow_wake import MlflowServerError
from .settings import Settings

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = Path("infra/mlflow-server.yaml")
DEFAULT_LOCK = Path("uv.lock")
PORT = 5000
ADMIN_SUFFIX = "-mlflow-admin-password"
CI_SUFFIX = "-mlflow-ci-password"
# EventBridge Scheduler cron expressions have six fields inside cron(...) (EventBridge Scheduler User Guide,
# "Schedule types": cron(minutes hours day-of-month month day-of-week year)).
CRON = re.compile(r"cron\((\S+ ){5}\S+\)")
# The stack's own Session document (infra/mlflow-server.yaml TunnelDocument): port 5000 fixed, localPortNumber
# its only parameter. SSM document names are at most 128 characters (StartSession DocumentName in botocore's ssm
# model) and may not start with aws or amazon, which AWS reserves (CreateDocument API reference, Name).
TUNNEL_DOCUMENT_PREFIX = "mlflow-tunnel-"
DOCUMENT_NAME_MAX = 128
PLUGIN = "session-manager-plugin"
PLUGIN_DOCS = "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"


@dataclass(frozen=True)
class ServerInputs:
    repository: str  # owner/name, as bootstrap was given it
    instance_type: str = "t3.small"
    subnet_id: str = ""
    stop_schedule: str = ""
    start_schedule: str = ""
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        problems = []
        if not stack.REPOSITORY.fullmatch(self.repository):
            problems.append(f"--repository: '{self.repository}' is not owner/name (e.g. your-org/ml-project)")
        for flag, value in (
            ("--stop-schedule", self.stop_schedule),
            ("--start-schedule", self.start_schedule),
        ):
            if value and not CRON.fullmatch(value):
                problems.append(
                    f"{flag}: '{value}' is not a six-field cron(...) expression, e.g. cron(0 20 ? * MON-FRI *)"
                )
        if self.start_schedule and not self.stop_schedule:
            problems.append(
                "--start-schedule: set --stop-schedule too (a start alone never stops the server)"
            )
        if problems:
            raise MlflowServerError("invalid mlflow-server input:\n  " + "\n  ".join(problems))


def server_stack_name(project: str, repository: str) -> str:
    """`mlflow-server-<project>-<repository key>`, beside the gpu-runner stack of the same repository."""
    return stack.named_stack("mlflow-server", project, repository)


def tunnel_document_name(project: str) -> str:
    """`mlflow-tunnel-<project>`: one per project in the account and region, like the stack."""
    return (TUNNEL_DOCUMENT_PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "-", project))[:DOCUMENT_NAME_MAX]


def parameter_names(ssm_prefix: str) -> dict[str, str]:
    return {"admin": f"{ssm_prefix}{ADMIN_SUFFIX}", "ci": f"{ssm_prefix}{CI_SUFFIX}"}


def locked_mlflow_version(lock: Path) -> str:
    """The MLflow the project locks: the server runs the same release as the clients that log to it."""
    try:
        packages = tomllib.loads(lock.read_text(encoding="utf-8")).get("package", [])
    except FileNotFoundError:
        raise MlflowServerError(f"--lock: {lock} not found (run from the project root)") from None
    for package in packages:
        if package.get("name") == "mlflow":
            return str(package["version"])
    raise MlflowServerError(f"--lock: {lock} locks no mlflow package: is it this project's uv.lock?")


def ensure_password(ssm: Any, name: str, description: str) -> bool:
    """A SecureString with a new random password unless one exists (re-running `up` keeps it); True if created.
    Under the AWS managed key aws/ssm (PutParameter without KeyId)."""
    try:
        ssm.get_parameter(Name=name)
        return False
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ParameterNotFound":
            raise
    # 32 bytes, URL-safe: no character the env file, the ini file or basic auth would need to quote.
    ssm.put_parameter(
        Name=name,
        Description=description,
        Type="SecureString",
        Value=secrets.token_urlsafe(32),
        Overwrite=False,
    )
    return True


# What the tunnel role's trust needs from the gpu-runner stack's parameters (the repository bootstrap was given).
RUNNER_STACK_PARAMETERS = ("GitHubOwner", "GitHubRepository", "GitHubOwnerId", "GitHubRepositoryId")


def stack_parameters(
    settings: Settings,
    inputs: ServerInputs,
    runner: Mapping[str, str],
    runner_parameters: Mapping[str, str],
    mlflow_version: str,
) -> list[dict[str, str]]:
    values = {
        "Project": settings.project,
        "BucketName": runner["BucketName"],
        "SsmPrefix": settings.ssm_prefix,
        "RunnerSecurityGroupId": runner["RunnerSecurityGroupId"],
        "VpcId": runner_parameters.get("VpcId", ""),
        "SubnetId": inputs.subnet_id or (settings.subnet_ids[0] if settings.subnet_ids else ""),
        "InstanceType": inputs.instance_type,
        "MlflowVersion": mlflow_version,
        "StopSchedule": inputs.stop_schedule,
        "StartSchedule": inputs.start_schedule,
        "ScheduleTimezone": inputs.timezone,
        "TunnelDocumentName": tunnel_document_name(settings.project),
        "OidcProviderArn": runner["OidcProviderArn"],
        **{key: runner_parameters.get(key, "") for key in RUNNER_STACK_PARAMETERS},
    }
    return [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]


def up(
    settings: Settings,
    cfn: Any,
    ssm: Any,
    inputs: ServerInputs,
    *,
    template: Path = DEFAULT_TEMPLATE,
    lock: Path = DEFAULT_LOCK,
    delay_seconds: int = 10,
) -> dict[str, str]:
    """Deploy (or update) the server stack; returns its outputs."""
    try:
        body = template.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MlflowServerError(f"--template: {template} not found (run from the project root)") from None
    version = locked_mlflow_version(lock)
    runner, runner_parameters = stack.runner_stack(
        cfn,
        stack.stack_name(settings.project, inputs.repository),
        "the server reuses its bucket, VPC and runner security group",
        MlflowServerError,
    )
    names = parameter_names(settings.ssm_prefix)
    for name, what in (
        (names["admin"], "MLflow admin password (team server)"),
        (names["ci"], "MLflow password of the workflows' ci user (team server)"),
    ):
        if ensure_password(ssm, name, what):
            log.info(f"stored a new {what} in {name}")
    parameters = stack_parameters(settings, inputs, runner, runner_parameters, version)
    name = server_stack_name(settings.project, inputs.repository)
    outputs = stack.deploy(cfn, name, body, parameters, delay_seconds=delay_seconds)
    missing = {
        "InstanceId", "TrackingUri", "CiUsername", "CiPasswordParameter", "ReadyParameter", "TunnelRoleArn",
        "TunnelDocument",
    } - set(outputs)  # fmt: skip
    if missing:
        raise MlflowServerError(
            f"stack {name} lacks output(s) {', '.join(sorted(missing))}: is {template} ours?"
        )
    log.info(next_steps(inputs.repository, settings.region, outputs))
    return outputs


def next_steps(repository: str, region: str, outputs: Mapping[str, str]) -> str:
    repo, reg = shlex.quote(repository), shlex.quote(region)
    read = (
        f"aws ssm get-parameter --region {reg} --with-decryption --query Parameter.Value --output text --name"
    )
    return "\n".join(
        [
            "# The team MLflow server. Point the workflows at it (the password goes from SSM to GitHub unprinted):",
            f"gh variable set MLFLOW_TRACKING_URI --repo {repo} --body {shlex.quote(outputs['TrackingUri'])}",
            f"gh secret set MLFLOW_TRACKING_USERNAME --repo {repo} --body {shlex.quote(outputs['CiUsername'])}",
            f"{read} {shlex.quote(outputs['CiPasswordParameter'])} | gh secret set MLFLOW_TRACKING_PASSWORD --repo {repo}",
            "# The jobs on GitHub-hosted runners (outside the VPC) reach it through an SSM tunnel with this role:",
            f"gh variable set MLFLOW_TUNNEL_ROLE_ARN --repo {repo} --body {shlex.quote(outputs['TunnelRoleArn'])}",
            "# People: `make mlflow-tunnel`, then http://127.0.0.1:5000 as admin, password:",
            f"#   {read} {shlex.quote(outputs.get('AdminPasswordParameter', '<prefix>-mlflow-admin-password'))}",
        ]
    )


def down(settings: Settings, cfn: Any, repository: str, *, delay_seconds: int = 10) -> None:
    """Delete the stack; the data volume leaves its final snapshot (DeletionPolicy: Snapshot), the passwords stay."""
    name = server_stack_name(settings.project, repository)
    if stack.stack_status(cfn, name) is None:
        log.info(f"no MLflow server stack {name}: nothing to delete")
        return
    cfn.delete_stack(StackName=name)
    cfn.get_waiter("stack_delete_complete").wait(
        StackName=name, WaiterConfig={"Delay": delay_seconds, "MaxAttempts": 120}
    )
    names = parameter_names(settings.ssm_prefix)
    log.info(
        f"deleted {name}. Kept: the data volume's final snapshot (tag mlflow-server:project={settings.project}; "
        f"`make mlflow-server-up` starts from an empty volume, restore the snapshot by hand to keep the runs), the "
        f"artifacts under s3://<bucket>/mlflow-artifacts/ and the passwords {names['admin']}, {names['ci']}"
    )


def server_outputs(cfn: Any, settings: Settings, repository: str) -> dict[str, str]:
    """The deployed stack's outputs, with InstanceId and TunnelDocument (what the tunnel needs)."""
    name = server_stack_name(settings.project, ServerInputs(repository).repository)
    if stack.stack_status(cfn, name) is None:
        raise MlflowServerError(
            f"no MLflow server stack {name} in {settings.region}: run `make mlflow-server-up` first"
        )
    outputs = stack.stack_outputs(cfn, name)
    missing = {"InstanceId", "TunnelDocument"} - set(outputs)
    if missing:
        raise MlflowServerError(
            f"stack {name} has no {' or '.join(sorted(missing))} output (still creating? an older stack: run "
            "`make mlflow-server-up` again)"
        )
    return outputs


def tunnel_command(instance_id: str, region: str, local_port: int, document: str) -> list[str]:
    """The AWS CLI's port forwarding session through the stack's document: 127.0.0.1:<local_port> here to port
    5000 on the server (the document fixes the remote port; localPortNumber is its one parameter)."""
    if not 1 <= local_port <= 65535:
        raise MlflowServerError(f"--local-port: {local_port} is not a TCP port (1-65535)")
    parameters = json.dumps({"localPortNumber": [str(local_port)]}, separators=(",", ":"))
    return ["aws", "ssm", "start-session", "--region", region, "--target", instance_id,
            "--document-name", document, "--parameters", parameters]  # fmt: skip


def require_plugin() -> None:
    """The AWS CLI runs port forwarding through Session Manager's plugin, a separate install."""
    if shutil.which(PLUGIN) is None:
        raise MlflowServerError(
            f"{PLUGIN} is not on PATH: the tunnel needs AWS's Session Manager plugin ({PLUGIN_DOCS})"
        )
