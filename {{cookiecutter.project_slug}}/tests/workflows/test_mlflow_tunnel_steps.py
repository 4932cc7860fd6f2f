"""Which jobs reach MLflow through the team server's SSM tunnel (the platform's mlflow-tunnel action).

A job on a GitHub-hosted runner is outside the VPC: every step of it that is given MLFLOW_TRACKING_URI takes the
tunnel step's output (which is the variable itself when no tunnel role is set). A job on a GPU runner is inside
the VPC and takes the variable directly. (That the tunnel role's credentials never become the job's is a property
of the action itself, tested where it lives: the template repository's tests/test_platform_actions.py.)"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from workflow_files import (
    AWS_CREDENTIALS,
    GITHUB_HOSTED_RE,
    RUNNER_SYNC,
    SETUP_ACTION,
    TUNNEL_ACTION,
    TUNNEL_CREDENTIALS,
    all_workflows,
    as_expression,
    step_uses,
)

URI = "MLFLOW_TRACKING_URI"
THROUGH_TUNNEL = as_expression("steps.mlflow.outputs.tracking-uri")
# The stop job's teardown: the tunnel step may be skipped (no role) or fail (continue-on-error), and the cost must
# still be tried against the variable.
THROUGH_TUNNEL_OR_VARIABLE = as_expression("steps.mlflow.outputs.tracking-uri || vars.MLFLOW_TRACKING_URI")
DIRECT = as_expression("vars.MLFLOW_TRACKING_URI")


def workflows(project: Path) -> dict[str, dict[str, Any]]:
    return all_workflows(project)


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


def test_every_hosted_mlflow_step_goes_through_the_tunnel(project: Path) -> None:
    docs = workflows(project)
    assert tunnel_problems(docs) == []
    # The jobs the gap was about (docs/mlflow-server.md), each with its tunnel.
    expected = {
        ("gpu-runner-stop", "stop"), ("train", "comment"), ("sweep", "plan"), ("sweep", "collect"),
        ("sweep", "comment"), ("promote", "promote"), ("predict", "resolve"), ("predict", "predict"), ("batch", "batch"),
    }  # fmt: skip
    with_tunnel = {
        (name, job_id)
        for name, doc in docs.items()
        for job_id, job in doc.get("jobs", {}).items()
        if any(is_tunnel(s) for s in job.get("steps") or [])
    }
    assert with_tunnel == expected


def test_a_written_out_tunnels_credentials_reach_the_connect_step_alone(project: Path) -> None:
    """stop and batch.yml write the platform action's two steps out: as in the action, the tunnel role's
    credentials are the credentials step's outputs (never the job's environment) and only the connect step
    reads them; the job's later steps hold exactly the credentials they held without the tunnel."""
    docs = workflows(project)
    for name, job_id in (("gpu-runner-stop", "stop"), ("batch", "batch")):
        steps = docs[name]["jobs"][job_id]["steps"]
        (credentials,) = [s for s in steps if s.get("id") == TUNNEL_CREDENTIALS]
        assert step_uses(credentials) == AWS_CREDENTIALS, name
        assert credentials["with"]["output-env-credentials"] == "false", name
        assert credentials["with"]["output-credentials"] == "true", name
        readers = [
            s.get("id") for s in steps if f"steps.{TUNNEL_CREDENTIALS}.outputs" in str(s.get("env", {}))
        ]
        assert readers == ["mlflow"], (name, readers)
        assert not any("GITHUB_ENV" in s.get("run", "") for s in steps), name


def test_the_tunnel_never_delays_or_blocks_the_teardown(project: Path) -> None:
    stop = workflows(project)["gpu-runner-stop"]["jobs"]["stop"]
    (tunnel,) = [s for s in stop["steps"] if is_tunnel(s)]
    (credentials,) = [s for s in stop["steps"] if s.get("id") == TUNNEL_CREDENTIALS]
    assert "vars.MLFLOW_TUNNEL_ROLE_ARN != ''" in credentials["if"]
    assert "steps.tunnel-credentials.outcome == 'success'" in tunnel["if"]
    for step in (credentials, tunnel):
        assert step["continue-on-error"] is True and "always()" in step["if"]
    assert "--no-wake" in tunnel["run"] and "--timeout=60 " in tunnel["run"]
    (teardown,) = [s for s in stop["steps"] if s.get("name") == "Tear down the runner and the instance"]
    assert teardown["env"][URI] == THROUGH_TUNNEL_OR_VARIABLE


def test_the_check_catches_a_planted_direct_uri_and_a_gpu_tunnel(project: Path) -> None:
    docs = copy.deepcopy(workflows(project))
    plan = docs["sweep"]["jobs"]["plan"]["steps"]
    next(s for s in plan if URI in (s.get("env") or {}))["env"][URI] = DIRECT
    docs["train"]["jobs"]["train"]["steps"].insert(0, {"uses": TUNNEL_ACTION, "id": "mlflow"})
    problems = " | ".join(tunnel_problems(docs))
    assert "sweep.plan: Plan the wave is outside the VPC but takes" in problems
    assert "train.train:" in problems and "runs inside the VPC" in problems
