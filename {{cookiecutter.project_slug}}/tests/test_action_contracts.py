"""Every `uses:` of this project's workflows respects the contract of what it calls, and every output a `run:`
step's reader expects is one its code writes.

The checker is the platform's (`gpu_runner_testing.workflow_checks.action_contracts`, tested where it lives with
planted mismatches in the platform's own workflows): a misspelt `with:` key is only a warning on GitHub, so it is
caught here. The remote actions' contracts were read from each action.yml at its pin and ship with the platform;
the platform's actions and reusable workflows are resolved in the tree of the commit this project pins. What this
file adds is what only this project knows: its own workflows, the outputs its package's commands write (the
constants of the platform's gpu_job.job_contract), and the inputs it passes to the act doubles its stories run with.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_job import job_contract as training_contract
from gpu_runner_testing.platform_tree import platform_tree
from gpu_runner_testing.story import ACTION_DOUBLES
from gpu_runner_testing.workflow_checks.action_contracts import (
    RUNNER_COMMAND_OUTPUTS,
    Checker,
    commands_called,
    double_problems,
    doubled,
    passed_inputs,
    planted,
    remote_uses,
    run_output_problems,
)

from gpu_runner.pin.project_pin import read_pin

PROJECT = Path(__file__).resolve().parents[1]
PIN = read_pin(PROJECT)
CHECKER = Checker(
    root=PROJECT,
    repository="{{ cookiecutter.github_owner }}/{{ cookiecutter.github_repo }}",
    platform=(PIN.repository, PIN.commit),
    platform_root=platform_tree(PROJECT, PROJECT / ".e2e-cache"),
)
WORKFLOWS = sorted((PROJECT / ".github" / "workflows").glob("*.yml"))
# The project's own composite actions (none in a bake: an action a team adds).
COMPOSITES = sorted((PROJECT / ".github" / "actions").glob("*/action.yml"))
TRAIN = PROJECT / ".github" / "workflows" / "train.yml"
USES = remote_uses(WORKFLOWS)  # every remote action step of the workflows
DOUBLED = doubled(USES, CHECKER.contracts)  # double name -> the contracts of the pins it stands in for

# What the package's commands write to $GITHUB_OUTPUT (gpu_job.job_contract's constants), beside gpu-runner's.
PACKAGE_OUTPUTS: dict[str, set[str]] = {
    "python train": {training_contract.MLFLOW_RUN_ID_OUTPUT},
    "python gpu-preflight": {training_contract.GPU_PREFLIGHT_OUTPUT},
    # sweep.yml's commands (`sweep <action>`); a trial trains, so it writes what train writes.
    "python sweep check": {training_contract.SWEEP_PARALLEL_OUTPUT},
    "python sweep plan": {
        training_contract.SWEEP_MATRIX_OUTPUT,
        training_contract.SWEEP_WAVE_OUTPUT,
        training_contract.SWEEP_TRIALS_OUTPUT,
        training_contract.SWEEP_PARENT_RUN_OUTPUT,
    },
    "python sweep trial": {training_contract.MLFLOW_RUN_ID_OUTPUT},
    "python sweep collect": {training_contract.SWEEP_NEXT_WAVE_OUTPUT},
    # predict.yml's command: `--check` writes the pinned model, its export and the count; a batch the run id.
    "python predict": {
        training_contract.PREDICT_MODEL_OUTPUT,
        training_contract.PREDICT_EXPORT_OUTPUT,
        training_contract.PREDICT_IMAGES_OUTPUT,
        training_contract.MLFLOW_RUN_ID_OUTPUT,
    },
}
COMMAND_OUTPUTS = {**RUNNER_COMMAND_OUTPUTS, **PACKAGE_OUTPUTS}


@pytest.mark.parametrize("path", [*WORKFLOWS, *COMPOSITES], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_uses_respects_the_action_contract(path: Path) -> None:
    assert CHECKER.problems(path) == []


def test_every_workflow_is_checked() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "train.yml", "reap.yml", "sweep.yml", "predict.yml"}
    assert USES, "no remote action found: the check would have nothing to check"


@pytest.mark.parametrize("name", sorted(DOUBLED))
def test_the_stories_doubles_accept_what_the_workflows_pass(name: str) -> None:
    assert double_problems(ACTION_DOUBLES / name, DOUBLED[name], passed_inputs(USES, name)) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_output_read_is_one_its_code_writes(path: Path) -> None:
    assert run_output_problems(path, COMMAND_OUTPUTS) == []


def test_the_workflows_read_outputs_of_every_command_they_call() -> None:
    """The check above has something to check: every command of the package the workflows call, and every
    gpu-runner command they call that writes outputs, has an output read somewhere."""
    called = commands_called(WORKFLOWS, COMMAND_OUTPUTS)
    assert set(PACKAGE_OUTPUTS) <= set(called), sorted(set(PACKAGE_OUTPUTS) - set(called))
    assert [command for command, read in called.items() if not read] == []


# ---------------------------------------------------------------------- this project's wiring, planted wrong
def test_a_platform_action_misspelt_or_at_another_commit_fails(tmp_path: Path) -> None:
    """The platform's setup action is resolved against its action.yml at the project's pin: a misspelt input
    fails here, and so does a call of the platform at another commit."""
    reap = PROJECT / ".github" / "workflows" / "reap.yml"
    found = CHECKER.problems(planted(tmp_path, reap, "install: runner", "instal: runner"))
    assert any("unknown input 'instal' (did you mean 'install'?)" in p for p in found), found
    setup = f"/.github/actions/setup@{PIN.commit}"
    found = CHECKER.problems(planted(tmp_path, reap, setup, setup.replace(PIN.commit, "1" * 40)))
    assert any(f"is not the pinned platform {PIN.repository}@{PIN.commit}" in p for p in found), found


def test_a_call_of_the_platforms_workflow_that_it_does_not_declare_fails(tmp_path: Path) -> None:
    """An input the called workflow does not declare, a secret it does not declare, and an output it lacks."""
    copy = planted(tmp_path, TRAIN, "      attempt: ", "      attempts: ")
    text = copy.read_text(encoding="utf-8")
    secret = "\n      MLFLOW_TRACKING_PASSWORD: "  # the stop job's `secrets:` (6 spaces: not a step's env)
    assert secret in text, "train.yml's stop job passes no MLflow password"
    text = text.replace(secret, secret.replace("PASSWORD", "PASSWORD_"), 1)
    text = text.replace("needs.start.outputs.region", "needs.start.outputs.regoin", 1)
    copy.write_text(text, encoding="utf-8")
    found = CHECKER.problems(copy)
    assert any("unknown input 'attempts' (did you mean 'attempt'?)" in p for p in found), found
    assert any("unknown secret 'MLFLOW_TRACKING_PASSWORD_'" in p for p in found), found
    assert any("reads output 'regoin' of job 'start'" in p for p in found), found


def test_an_output_the_steps_code_never_writes_fails(tmp_path: Path) -> None:
    copy = planted(tmp_path, TRAIN, "steps.timeline.outputs.boot-at", "steps.timeline.outputs.boots-at")
    found = run_output_problems(copy, COMMAND_OUTPUTS)
    assert any("reads output 'boots-at' of step 'timeline'" in p for p in found), found
