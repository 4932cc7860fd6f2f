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
    GITHUB_HOSTED_RE,
    SETUP_ACTION,
    TUNNEL_ACTION,
    as_expression,
    load_yaml,
    step_uses,
)

URI = "MLFLOW_TRACKING_URI"
THROUGH_TUNNEL = as_expression("steps.mlflow.outputs.tracking-uri")
# The stop job's teardown: the tunnel step may be skipped (no role) or fail (continue-on-error), and the cost must
# still be tried against the variable.
THROUGH_TUNNEL_OR_VARIABLE = as_expression("steps.mlflow.outputs.tracking-uri || vars.MLFLOW_TRACKING_URI")
DIRECT = as_expression("vars.MLFLOW_TRACKING_URI")


def workflows(project: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: load_yaml(p) for p in sorted((project / ".github" / "workflows").glob("*.yml"))}


def tunnel_problems(docs: dict[str, dict[str, Any]]) -> list[str]:
    """Every hosted job's MLflow step without the tunnel in front of it, every GPU job's with one."""
    problems = []
    for name, doc in docs.items():
        for job_id, job in doc.get("jobs", {}).items():
            steps = job.get("steps") or []
            hosted = isinstance(job.get("runs-on"), str) and bool(GITHUB_HOSTED_RE.match(job["runs-on"]))
            tunnels = [i for i, s in enumerate(steps) if step_uses(s) == TUNNEL_ACTION]
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
                if tunnel.get("with", {}).get("role-to-assume") != as_expression(
                    "vars.MLFLOW_TUNNEL_ROLE_ARN"
                ):
                    problems.append(f"{name}.{job_id}: the tunnel's role is not vars.MLFLOW_TUNNEL_ROLE_ARN")
                if not any(step_uses(s) == SETUP_ACTION for s in steps[:index]):
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
        if any(step_uses(s) == TUNNEL_ACTION for s in job.get("steps") or [])
    }
    assert with_tunnel == expected


def test_the_tunnel_never_delays_or_blocks_the_teardown(project: Path) -> None:
    stop = workflows(project)["gpu-runner-stop"]["jobs"]["stop"]
    (tunnel,) = [s for s in stop["steps"] if step_uses(s) == TUNNEL_ACTION]
    assert tunnel["continue-on-error"] is True
    assert tunnel["with"]["wake"] == "false" and int(tunnel["with"]["timeout-seconds"]) <= 60
    assert "always()" in tunnel["if"] and "vars.MLFLOW_TUNNEL_ROLE_ARN != ''" in tunnel["if"]
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
