"""The platform's workflows and composite actions, where they live, held to the contracts of what they call;
and the checker a bake applies to its own workflows (gpu_runner_testing.workflow_checks.action_contracts)
shown to fail on each kind of mismatch, planted in the platform's start workflow.

Also here, once: the pinned actions' contracts say where they were read, and the stories' act doubles
(gpu_runner_testing.story.ACTION_DOUBLES) declare only what the real actions have and accept what the
platform's workflows pass them (a bake checks what its own workflows pass).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import gpu_runner.core.workflow_contract as runner_contract
import pytest
import yaml
from gpu_runner_testing.story import ACTION_DOUBLES
from gpu_runner_testing.workflow_checks.action_contracts import (
    OUTPUT_READ,
    RUNNER_COMMAND_OUTPUTS,
    SHA,
    Checker,
    commands_called,
    double_problems,
    doubled,
    passed_inputs,
    planted,
    provenance_problems,
    remote_uses,
    run_output_problems,
)

ROOT = Path(__file__).resolve().parents[1]
# The platform's reusable workflows call no workflow or action of this repository (a caller would get them at
# its own ref, not at the pin): everything they use is a pinned remote action.
CHECKER = Checker(root=ROOT, repository="your-org/mlops-template")
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONS = sorted((ROOT / ".github" / "actions").glob("*/action.yml"))
START = ROOT / ".github" / "workflows" / "gpu-runner-start.yml"
# What a project's story runs of the platform (its reusable workflows and actions, not this repository's
# ci.yml), whose remote actions the act doubles stand in for.
REUSABLE = ("gpu-runner-start", "gpu-runner-stop", "batch")
STORY_FILES = [*(ROOT / ".github" / "workflows" / f"{name}.yml" for name in REUSABLE), *ACTIONS]
STORY_USES = remote_uses(STORY_FILES)
# Double name -> the contracts of the pins it stands in for.
DOUBLED = doubled(STORY_USES, CHECKER.contracts)


@pytest.mark.parametrize("path", [*WORKFLOWS, *ACTIONS], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_uses_respects_the_called_actions_contract(path: Path) -> None:
    assert CHECKER.problems(path) == []


def test_the_platforms_files_are_all_checked() -> None:
    assert {p.name for p in WORKFLOWS} >= {"gpu-runner-start.yml", "gpu-runner-stop.yml", "batch.yml"}
    assert [p.parent.name for p in ACTIONS] == ["mlflow-tunnel", "setup"]
    assert remote_uses([*WORKFLOWS, *ACTIONS]), (
        "no remote action found: the check would have nothing to check"
    )


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_output_read_is_one_its_code_writes(path: Path) -> None:
    assert run_output_problems(path) == []


def test_the_workflows_read_outputs_of_every_command_they_call() -> None:
    """The check above has something to check: the platform's workflows call launch, wait, workflow-settings
    and the batch commands, and read an output of each (all of launch's)."""
    called = commands_called(WORKFLOWS, RUNNER_COMMAND_OUTPUTS)
    assert {"gpu-runner launch", "gpu-runner wait", "gpu-runner batch submit"} <= set(called), called
    assert [command for command, read in called.items() if not read] == []
    read = {o for path in WORKFLOWS for _, o in OUTPUT_READ.findall(path.read_text(encoding="utf-8"))}
    assert set(runner_contract.LaunchOutput) <= read, sorted(set(runner_contract.LaunchOutput) - read)


def test_the_contracts_say_where_they_were_read() -> None:
    contracts = CHECKER.contracts
    assert provenance_problems(contracts) == []
    assert all(SHA.match(sha) for _, sha in contracts), "a contract of a pin that is no full SHA"


def test_a_contract_not_read_at_its_pin_and_not_marked_fails() -> None:
    contracts = CHECKER.contracts
    key, action = next(iter(contracts.items()))
    moved = copy.deepcopy(action) | {"sha_in_snapshot": False, "note": "read somewhere", "read_at_tag": "v1"}
    assert any("not marked NOT CHECKED" in p for p in provenance_problems({key: moved}))
    assert any("not at the pin" in p for p in provenance_problems({key: action | {"read_at": "0" * 40}}))


@pytest.mark.parametrize("name", sorted(DOUBLED))
def test_each_double_declares_only_what_the_real_action_has(name: str) -> None:
    assert double_problems(ACTION_DOUBLES / name, DOUBLED[name], passed_inputs(STORY_USES, name)) == []


# ------------------------------------------------------------------ planted mismatches: the check can fail
def test_a_planted_unknown_input_fails(tmp_path: Path) -> None:
    found = CHECKER.problems(
        planted(
            tmp_path, START, "role-session-name: gpu-runner-start-", "role-session-nam: gpu-runner-start-"
        )
    )
    assert any("unknown input 'role-session-nam' (did you mean 'role-session-name'?)" in p for p in found), (
        found
    )


def test_a_planted_missing_required_input_fails(tmp_path: Path) -> None:
    region = re.search(r"^ +aws-region: .*\n", START.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert region, "gpu-runner-start.yml passes no aws-region"
    found = CHECKER.problems(planted(tmp_path, START, region.group(0), ""))
    assert any("missing required input 'aws-region'" in p for p in found), found


def test_a_planted_unknown_pin_fails(tmp_path: Path) -> None:
    uses = next(uses for uses, _ in remote_uses([START]))
    found = CHECKER.problems(planted(tmp_path, START, uses, uses[:-40] + "0" * 40))
    assert any("is not in the pinned platform's action_contracts.json" in p for p in found), found
    found = CHECKER.problems(planted(tmp_path, START, uses, uses[:-40] + "v7"))
    assert any("is not pinned to a full commit SHA" in p for p in found), found


def test_a_planted_output_the_action_lacks_fails(tmp_path: Path) -> None:
    line = re.search(r"^ +uses: actions/checkout@.*\n", START.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert line, "gpu-runner-start.yml checks nothing out"
    copied = planted(tmp_path, START, line.group(0), line.group(0) + "        id: co\n")
    # A last step of the start job reads the output.
    text = (
        copied.read_text(encoding="utf-8").rstrip("\n")
        + '\n      - run: echo "${{ steps.co.outputs.sha }}"\n'
    )
    copied.write_text(text, encoding="utf-8")
    found = CHECKER.problems(copied)
    assert any("reads output 'sha' of step 'co'" in p for p in found), found


def test_a_planted_output_no_code_writes_fails(tmp_path: Path) -> None:
    """A key gpu-runner launch never writes (its `instance-id` misspelt)."""
    copied = planted(tmp_path, START, "steps.launch.outputs.instance-id", "steps.launch.outputs.instance-idd")
    found = run_output_problems(copied)
    assert any(
        "reads output 'instance-idd' of step 'launch', which its code never writes" in p for p in found
    )


def test_a_planted_call_of_a_workflow_nobody_pins_fails(tmp_path: Path) -> None:
    caller = tmp_path / "caller.yml"
    caller.write_text(
        yaml.safe_dump(
            {"on": "push", "jobs": {"gpu": {"uses": f"someone/else/.github/workflows/x.yml@{'1' * 40}"}}}
        ),
        encoding="utf-8",
    )
    found = CHECKER.problems(caller)
    assert any(
        "is neither one of your-org/mlops-template's own nor the pinned platform's (none)" in p for p in found
    )


def test_a_double_with_an_input_the_real_action_lacks_fails(tmp_path: Path) -> None:
    name = sorted(DOUBLED)[0]
    double = tmp_path / name
    double.mkdir()
    meta = yaml.safe_load((ACTION_DOUBLES / name / "action.yml").read_text(encoding="utf-8"))
    meta["inputs"]["made-up"] = {"required": False, "default": ""}
    meta["outputs"] = {**(meta.get("outputs") or {}), "made-up-output": {"value": "x"}}
    (double / "action.yml").write_text(yaml.safe_dump(meta), encoding="utf-8")
    found = double_problems(double, DOUBLED[name], {"never-declared"})
    assert any("input 'made-up' is not the real action's" in p for p in found), found
    assert any("output 'made-up-output' is not the real action's" in p for p in found), found
    assert any("pass 'never-declared'" in p for p in found), found
