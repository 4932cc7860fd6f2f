"""The batch backend's wiring on the project's side (issue 18): how train.yml and sweep.yml hand their GPU work to
the platform's batch.yml at the pinned commit. Who may run batch.yml and in which order its steps hold what is
tested where it lives (the template repository's tests/test_platform_workflows.py); the stories that run it under
act are tests/e2e/test_batch_train_workflow.py and test_batch_sweep_workflow.py."""

from __future__ import annotations

from pathlib import Path

from gpu_runner_testing.workflow_checks.workflow_files import (
    answers_of,
    as_expression,
    gpu_workflows,
    load_yaml,
    platform_call,
    workflow_path,
)


def test_train_and_sweep_hand_their_gpu_work_to_the_platforms_batch_yml(project: Path) -> None:
    workflows = gpu_workflows(project)
    train, sweep = workflows["train"]["jobs"], workflows["sweep"]["jobs"]
    declared = load_yaml(workflow_path(project, "batch"))["on"]["workflow_call"]["inputs"]
    for jobs, needs, condition in (
        (train, "start", "needs.start.outputs.backend == 'batch'"),
        (
            sweep,
            "plan",
            as_expression("needs.plan.outputs.trials != '0' && needs.plan.outputs.backend == 'batch'"),
        ),
    ):
        batch = jobs["batch"]
        assert batch["uses"] == platform_call(project, "batch")
        assert batch["needs"] == needs and batch["if"] == condition
        assert batch["permissions"] == {"contents": "read", "id-token": "write"}
        # Secrets by name, never `inherit`: the called workflow gets the MLflow login and nothing else.
        assert set(batch["secrets"]) == {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"}
        assert set(batch["with"]) <= set(declared)
    # The runner backend's jobs run only when the batch job does not, and the other way round.
    assert train["train"]["if"] == "needs.start.outputs.backend != 'batch'"
    assert sweep["trial"]["if"] == as_expression(
        "needs.plan.outputs.trials != '0' && needs.plan.outputs.backend != 'batch'"
    )
    assert sweep["batch"]["with"]["kind"] == "sweep" and "kind" not in train["batch"]["with"]
    # batch.yml takes nothing from the project's answers: the package it runs comes from the caller.
    package = answers_of(project)["package_name"]
    assert train["batch"]["with"]["package"] == sweep["batch"]["with"]["package"] == package
    assert sweep["collect"]["needs"] == ["plan", "trial", "batch"]
