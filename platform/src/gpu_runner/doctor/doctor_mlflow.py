"""The MLflow check of `gpu-runner doctor`: the tracking server the train job will log to answers.

The URI is the repository variable MLFLOW_TRACKING_URI (what the train job gets; read by the repository settings
check), else MLFLOW_TRACKING_URI of this shell. Credentials from MLFLOW_TRACKING_USERNAME/PASSWORD (or
MLFLOW_TRACKING_TOKEN) in this shell, as MLflow's clients take them. One authenticated read:
GET /api/2.0/mlflow/experiments/search?max_results=1.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

from gpu_runner.core.aws import Aws
from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest
from gpu_runner.doctor.doctor_checks import Check, Outcome, Target, failed, passed

# The repository variable the hosted jobs' tunnel action assumes (.github/actions/mlflow-tunnel).
TUNNEL_ROLE_VARIABLE = "MLFLOW_TUNNEL_ROLE_ARN"


def shown(uri: str) -> str:
    """The URI as printed: a `user:password@` in it is replaced, so the line can go into a ticket or a log."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def vpc_only(uri: str) -> bool:
    """A private (RFC 1918) address, as the team MLflow server's TrackingUri is: it answers inside the VPC only."""
    try:
        address = ipaddress.ip_address(urlsplit(uri).hostname or "")
    except ValueError:
        return False
    return address.is_private and not address.is_loopback and not address.is_link_local


def check_mlflow(target: Target, aws: Aws) -> Iterator[Outcome]:
    check = "MLflow"
    from_repository = target.repo_variables.get("MLFLOW_TRACKING_URI", "")
    raw = from_repository or target.env.get("MLFLOW_TRACKING_URI", "")
    uri = shown(raw)
    if not raw:
        yield passed(
            check,
            "MLFLOW_TRACKING_URI is not set: runs are kept as a workflow artifact (private repositories only, or "
            "MLFLOW_LOCAL_STORE_ARTIFACT=true)",
        )
        return
    client = MlflowRest.from_env({**target.env, "MLFLOW_TRACKING_URI": raw})
    if client is None:
        if not from_repository:
            yield passed(check, f"{uri} in this shell is a local store (the repository variable is not set)")
            return
        yield failed(
            check,
            f"the repository variable MLFLOW_TRACKING_URI is {uri!r}, a store on the GPU instance that ends with it",
            "set it to https://<your MLflow server>, or delete it (runs are then kept as a workflow artifact)",
        )
        return
    if vpc_only(raw):
        # Asked from here it would only time out: the server's security group admits the GPU runners alone. The
        # jobs on GitHub-hosted runners come through the SSM tunnel, which needs the tunnel role variable.
        if from_repository and not target.repo_variables.get(TUNNEL_ROLE_VARIABLE):
            yield failed(
                check,
                f"{uri} is a private address (the team MLflow server) and the repository variable "
                f"{TUNNEL_ROLE_VARIABLE} is not set: the jobs on GitHub-hosted runners (the stop job's cost "
                "logging, the pull-request comment, sweep.yml's plan and collect, promote.yml, predict.yml) cannot "
                "reach it",
                f"gh variable set {TUNNEL_ROLE_VARIABLE} --body <the stack's TunnelRoleArn> (`make "
                "mlflow-server-up` prints the line)",
            )
            return
        yield passed(
            check,
            f"{uri} is a private address (the team MLflow server): the GPU runners reach it directly, the jobs on "
            f"GitHub-hosted runners through the SSM tunnel ({TUNNEL_ROLE_VARIABLE}); not asked from here, "
            "`make mlflow-tunnel` to reach it",
        )
        return
    try:
        client.search_experiments(max_results=1)
    except MlflowError as error:
        denied = "HTTP 401" in str(error) or "HTTP 403" in str(error)
        fix = (
            "export MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (the repository's secrets) and run again"
            if denied
            else "check the URI and that the server is up and reachable from the internet"
        )
        yield failed(check, f"{uri}: {str(error).replace(raw.rstrip('/'), uri.rstrip('/'))}", fix)
        return
    yield passed(check, f"{uri} answers (experiments/search)")


CHECKS: list[tuple[str, Check]] = [("MLflow", check_mlflow)]
