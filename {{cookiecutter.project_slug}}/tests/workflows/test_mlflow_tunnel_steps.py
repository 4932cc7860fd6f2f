"""Which of the project's jobs reach MLflow through the team server's SSM tunnel (the platform's mlflow-tunnel
action): the rule is gpu_runner_testing.workflow_checks.tunnel_rules's. (That the tunnel role's credentials
never become the job's is a property of the action itself, and the tunnel written out in the platform's stop
and batch.yml is theirs: both tested where they live, the template repository's tests/test_platform_actions.py
and test_platform_workflows.py.)"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from gpu_runner_testing.workflow_checks.tunnel_rules import DIRECT, URI, tunnel_problems, with_tunnel
from gpu_runner_testing.workflow_checks.workflow_files import TUNNEL_ACTION, load_yaml


def workflows(project: Path) -> dict[str, dict[str, Any]]:
    """The project's own workflows, by file stem."""
    return {p.stem: load_yaml(p) for p in sorted((project / ".github" / "workflows").glob("*.yml"))}


def test_every_hosted_mlflow_step_goes_through_the_tunnel(project: Path) -> None:
    docs = workflows(project)
    assert tunnel_problems(docs) == []
    # The jobs the gap was about (manual/mlflow-server.md), each with its tunnel.
    assert with_tunnel(docs) == {
        ("train", "comment"), ("sweep", "plan"), ("sweep", "collect"), ("sweep", "comment"),
        ("promote", "promote"), ("predict", "resolve"), ("predict", "predict"),
    }  # fmt: skip


def test_the_check_catches_a_planted_direct_uri_and_a_gpu_tunnel(project: Path) -> None:
    docs = copy.deepcopy(workflows(project))
    plan = docs["sweep"]["jobs"]["plan"]["steps"]
    next(s for s in plan if URI in (s.get("env") or {}))["env"][URI] = DIRECT
    docs["train"]["jobs"]["train"]["steps"].insert(0, {"uses": TUNNEL_ACTION, "id": "mlflow"})
    problems = " | ".join(tunnel_problems(docs))
    assert "sweep.plan: Plan the wave is outside the VPC but takes" in problems
    assert "train.train:" in problems and "runs inside the VPC" in problems
