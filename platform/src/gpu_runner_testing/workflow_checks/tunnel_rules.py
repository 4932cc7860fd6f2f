"""Which jobs reach MLflow through the team server's SSM tunnel: the rule, shared by a project's checks of its own
workflows (tests/workflows/test_mlflow_tunnel_steps.py) and the template repository's of the platform's
(tests/test_platform_workflows.py).

A job on a GitHub-hosted runner is outside the VPC: every step of it that is given MLFLOW_TRACKING_URI takes the
tunnel step's output (which is the variable itself when no tunnel role is set). A job on a GPU runner is inside
the VPC and takes the variable directly."""

from __future__ import annotations

from typing import Any

from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    GITHUB_HOSTED_RE,
    RUNNER_SYNC,
    SETUP_ACTION,
    TUNNEL_ACTION,
    TUNNEL_CREDENTIALS,
    as_expression,
    step_uses,
)

URI = "MLFLOW_TRACKING_URI"
THROUGH_TUNNEL = as_expression("steps.mlflow.outputs.tracking-uri")
# The stop job's teardown: the tunnel step may be skipped (no role) or fail (continue-on-error), and the cost must
# still be tried against the variable.
THROUGH_TUNNEL_OR_VARIABLE = as_expression("steps.mlflow.outputs.tracking-uri || vars.MLFLOW_TRACKING_URI")
DIRECT = as_expression("vars.MLFLOW_TRACKING_URI")


# The connect step of the tunnel written out in gpu-runner-stop.yml and batch.yml (after its credentials step).
CONNECT = "mlflow-server connect"


def is_tunnel(step: dict[str, Any]) -> bool:
    """The platform's tunnel action, or its connect step written out."""
    return step_uses(step) == TUNNEL_ACTION or (step.get("id") == "mlflow" and CONNECT in step.get("run", ""))


def tunnel_role(steps: list[dict[str, Any]], tunnel: dict[str, Any]) -> Any:
    """The role the tunnel assumes: the action's input, or the written-out credentials step's."""
    if step_uses(tunnel) == TUNNEL_ACTION:
        return tunnel.get("with", {}).get("role-to-assume")
    credentials = [s for s in steps if s.get("id") == TUNNEL_CREDENTIALS and step_uses(s) == AWS_CREDENTIALS]
    return credentials[0].get("with", {}).get("role-to-assume") if len(credentials) == 1 else None


def installs_gpu_runner(step: dict[str, Any]) -> bool:
    return step_uses(step) == SETUP_ACTION or RUNNER_SYNC in step.get("run", "")


def tunnel_problems(docs: dict[str, dict[str, Any]]) -> list[str]:
    """Every hosted job's MLflow step without the tunnel in front of it, every GPU job's with one."""
    problems = []
    for name, doc in docs.items():
        for job_id, job in doc.get("jobs", {}).items():
            steps = job.get("steps") or []
            hosted = isinstance(job.get("runs-on"), str) and bool(GITHUB_HOSTED_RE.match(job["runs-on"]))
            tunnels = [i for i, s in enumerate(steps) if is_tunnel(s)]
            for index, step in enumerate(steps):
                value = (step.get("env") or {}).get(URI)
                if value is None:
                    continue
                where = f"{name}.{job_id}: {step.get('name')}"
                if not hosted:
                    if value != DIRECT or tunnels:
                        problems.append(f"{where} runs inside the VPC: {URI} must be {DIRECT}, no tunnel")
                    continue
                if value not in (THROUGH_TUNNEL, THROUGH_TUNNEL_OR_VARIABLE):
                    problems.append(f"{where} is outside the VPC but takes {URI} from {value}")
                if not tunnels or tunnels[0] > index:
                    problems.append(f"{where} has no tunnel step before it")
                elif steps[tunnels[0]].get("id") != "mlflow":
                    problems.append(f"{name}.{job_id}: the tunnel step's id is not `mlflow`")
            for index in tunnels:
                tunnel = steps[index]
                if tunnel_role(steps, tunnel) != as_expression("vars.MLFLOW_TUNNEL_ROLE_ARN"):
                    problems.append(f"{name}.{job_id}: the tunnel's role is not vars.MLFLOW_TUNNEL_ROLE_ARN")
                if not any(installs_gpu_runner(s) for s in steps[:index]):
                    problems.append(
                        f"{name}.{job_id}: the tunnel runs before the setup action installs gpu-runner"
                    )
                if job.get("permissions", {}).get("id-token") != "write":
                    problems.append(f"{name}.{job_id}: a tunnel without id-token: write")
    return problems


def with_tunnel(docs: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(workflow, job) of every job with a tunnel step."""
    return {
        (name, job_id)
        for name, doc in docs.items()
        for job_id, job in doc.get("jobs", {}).items()
        if any(is_tunnel(s) for s in job.get("steps") or [])
    }
