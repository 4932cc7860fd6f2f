"""Every `uses:` of the workflows and composite actions respects the used action's own contract.

GitHub checks little of this at run time: an unknown `with:` key is only a warning in the log, and
`required: true` "will not automatically return an error if the input is not specified" (docs.github.com,
Metadata syntax reference, `inputs`, read 2026-12-01). So a misspelt or renamed input silently does nothing, and
the first real push is where it shows. The contracts (input names, required, default, outputs, runs.using) were
read from each action's own action.yml at its pinned SHA and are kept in tests/contracts/actions.json, with where
they were read; an entry with `sha_in_snapshot: false` could not be read at the pin (see its note), and its
contract is that of the newest release the snapshot had: evidence, not proof.

A `run:` step's outputs are the contract of the code it runs: a workflow may read only the keys that code writes
(the constants of gpu_runner.core.workflow_contract and of the ML package's workflow_contract) or that the step's own
script appends to $GITHUB_OUTPUT.

The act doubles in tests/e2e/actions/ stand in for the real actions in the offline story, so they may only declare
inputs and outputs the real action has, and must accept every input the workflows pass.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_runner_testing.platform_tree import platform_tree

import gpu_runner.core.workflow_contract as runner_contract
from gpu_runner.pin.project_pin import read_pin
from {{ cookiecutter.package_name }} import workflow_contract as training_contract

PROJECT = Path(__file__).resolve().parents[1]
CONTRACTS_FILE = PROJECT / "tests" / "contracts" / "actions.json"
DOUBLES = PROJECT / "tests" / "e2e" / "actions"
# The platform's reusable workflows the project calls at its pin (start, stop, batch.yml): checked with the
# project's, since what they pass to third-party actions runs for this project.
PLATFORM_WORKFLOWS = platform_tree(PROJECT, PROJECT / ".e2e-cache") / ".github" / "workflows"
WORKFLOWS = sorted(
    [*(PROJECT / ".github" / "workflows").glob("*.yml")]
    + [PLATFORM_WORKFLOWS / f"{name}.yml" for name in ("gpu-runner-start", "gpu-runner-stop", "batch")]
)
# The project's own composite actions (none in a bake: an action a team adds). The platform's are called pinned,
# and their own steps are checked where they live, the template repository (tests/test_platform_actions.py).
COMPOSITES = sorted((PROJECT / ".github" / "actions").glob("*/action.yml"))
# A call of the platform's composite action: `<owner>/<template>/.github/actions/<name>@<commit>`, resolved against
# the action.yml of the pinned platform's tree (gpu_runner_testing.platform_tree).
PLATFORM_ACTION = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)/\.github/actions/(?P<name>[\w.-]+)@(?P<ref>\S+)$")
REMOTE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)@(?P<ref>[^@\s]+)$")
# A job calling a reusable workflow of this repository (sweep.yml's trial) or of the platform at the pinned commit
# (start, stop and batch.yml).
THIS_REPOSITORY = "{{ cookiecutter.github_owner }}/{{ cookiecutter.github_repo }}"
CALLED = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)/\.github/workflows/(?P<file>[\w.-]+\.ya?ml)@(?P<ref>\S+)$")
# sweep.yml's call of sweep-trial.yml: a workflow of the same repository and commit.
LOCAL_CALLED = re.compile(r"^\./\.github/workflows/(?P<file>[\w.-]+\.ya?ml)$")
NEEDS_OUTPUT_READ = re.compile(r"\bneeds\.([\w-]+)\.outputs\.([\w-]+)")
SHA = re.compile(r"^[0-9a-f]{40}$")
OUTPUT_READ = re.compile(r"\bsteps\.([\w-]+)\.outputs\.([\w-]+)")

Contract = dict[str, Any]

# What each command a `run:` step calls writes to $GITHUB_OUTPUT: the code's own constants, never restated here.
COMMAND_OUTPUTS: dict[str, set[str]] = {
    "gpu-runner workflow-settings": set(runner_contract.SettingsOutput),
    "gpu-runner launch": set(runner_contract.LaunchOutput),
    "gpu-runner wait": set(runner_contract.WaitOutput),
    "gpu-runner capacity": set(runner_contract.CapacityOutput),
    # The tunnel's connect step, written out in the stop job and batch.yml (the platform's mlflow-tunnel action).
    "gpu-runner mlflow-server": set(runner_contract.TunnelOutput),
    # batch.yml's (issue 18): the shipped archive, the MLflow run the job trains into, the job.
    "gpu-runner batch ship": {
        runner_contract.BatchOutput.SOURCE_URI,
        runner_contract.BatchOutput.SOURCE_SHA256,
    },
    "gpu-runner batch open-run": {runner_contract.BatchOutput.MLFLOW_RUN_ID},
    "gpu-runner batch submit": {runner_contract.BatchOutput.JOB_ID},
    "gpu-runner batch sweep-wave": {
        runner_contract.BatchOutput.TRIALS,
        runner_contract.BatchOutput.ARRAY_SIZE,
    },
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
GPU_RUNNER_COMMAND = re.compile(r"\bgpu-runner\s+--settings\s+\S+\s+((?:batch )?[\w-]+)")
PYTHON_COMMAND = re.compile(r"\bpython\s+-m\s+[\w.]+\s+((?:sweep\s+)?[\w-]+)")
# `echo "key=..." >> "${GITHUB_OUTPUT}"` in a step's own script; `${name}` stands for each arm of its `case`.
SHELL_OUTPUT = re.compile(r'echo\s+"([\w${}-]+)=[^"]*"\s*>>\s*"\$\{GITHUB_OUTPUT\}"')
CASE_ARM = re.compile(r"^\s*([\w-]+(?:\s*\|\s*[\w-]+)*)\)", re.MULTILINE)


def load_contracts() -> dict[tuple[str, str], Contract]:
    data = json.loads(CONTRACTS_FILE.read_text(encoding="utf-8"))
    return {(action["repo"], action["sha"]): action for action in data["actions"]}


CONTRACTS = load_contracts()


def scopes(doc: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(label, the scope's whole mapping, its steps): each job of a workflow, or a composite action's steps."""
    if "jobs" in doc:
        for job_id, job in doc["jobs"].items():
            yield f"{where} job {job_id}", job, job.get("steps") or []
    elif isinstance(doc.get("runs"), dict) and doc["runs"].get("using") == "composite":
        yield f"{where} (composite)", doc, doc["runs"].get("steps") or []


def remote_uses() -> list[tuple[str, dict[str, Any]]]:
    """(owner/repo@sha, step) of every remote action step in the workflows and composite actions."""
    found = []
    for path in [*WORKFLOWS, *COMPOSITES]:
        for _, _, steps in scopes(yaml.safe_load(path.read_text(encoding="utf-8")), path.name):
            found += [(step["uses"], step) for step in steps if REMOTE.match(step.get("uses", ""))]
    return found


# ---------------------------------------------------------------------- the real files
@pytest.mark.parametrize("path", [*WORKFLOWS, *COMPOSITES], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_uses_respects_the_action_contract(path: Path) -> None:
    assert problems(path) == []


def test_every_workflow_and_composite_action_is_checked() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "train.yml", "reap.yml"}
    assert remote_uses(), "no remote action found: the check would have nothing to check"


def test_the_contracts_say_where_they_were_read() -> None:
    for (repo, sha), action in CONTRACTS.items():
        assert action["snapshot"]["fetch"] == f"github:{repo}" and SHA.match(action["snapshot"]["head"])
        if action["sha_in_snapshot"]:
            assert action["read_at"] == sha
            # The version comment names a tag: where the snapshot has it, it is this commit.
            assert action["tag_commit"] in (None, sha), f"{repo}: tag {action['version']} is not {sha}"
        else:
            assert action["note"].startswith("NOT CHECKED") and action["read_at_tag"], action
        assert action["runs_using"] in {"node24", "composite", "docker"}, f"{repo}@{action['version']}"


# ---------------------------------------------------------------------- the act doubles
def doubled() -> dict[str, list[Contract]]:
    """Double name (tests/e2e/actions/<repo name>) -> the contracts of the pins it stands in for."""
    pins: dict[str, list[Contract]] = {}
    for uses, _ in remote_uses():
        match = REMOTE.match(uses)
        assert match is not None
        contract = CONTRACTS.get((match["repo"], match["ref"]))
        if contract is not None and contract not in pins.setdefault(match["repo"].split("/")[1], []):
            pins[match["repo"].split("/")[1]].append(contract)
    return pins


@pytest.mark.parametrize("name", sorted(doubled()))
def test_each_double_declares_only_what_the_real_action_has(name: str) -> None:
    passed = {
        key
        for uses, step in remote_uses()
        if uses.split("@")[0].split("/")[1] == name
        for key in step.get("with") or {}
    }
    assert double_problems(DOUBLES / name, doubled()[name], passed) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_output_read_is_one_its_code_writes(path: Path) -> None:
    assert run_output_problems(path) == []


def test_the_gpu_workflows_read_outputs_of_every_command_that_writes_them() -> None:
    """The check above has something to check: each command's outputs are read somewhere."""
    read = {o for path in WORKFLOWS for _, o in OUTPUT_READ.findall(path.read_text(encoding="utf-8"))}
    for command, keys in COMMAND_OUTPUTS.items():
        assert keys & read, f"no workflow reads an output of {command}"
    assert set(runner_contract.LaunchOutput) <= read, sorted(set(runner_contract.LaunchOutput) - read)


TRAIN = PROJECT / ".github" / "workflows" / "train.yml"
START = PLATFORM_WORKFLOWS / "gpu-runner-start.yml"


def test_a_planted_unknown_input_fails(tmp_path: Path) -> None:
    copy = planted(
        tmp_path, START, "role-session-name: gpu-runner-start-", "role-session-nam: gpu-runner-start-"
    )
    found = problems(copy)
    assert any("unknown input 'role-session-nam' (did you mean 'role-session-name'?)" in p for p in found), (
        found
    )


def test_a_planted_unknown_input_of_a_platform_action_fails(tmp_path: Path) -> None:
    """The platform's setup action is resolved against its action.yml at the project's pin: a misspelt input
    fails here, and so does a call of the platform at another commit."""
    reap = PROJECT / ".github" / "workflows" / "reap.yml"
    copy = planted(tmp_path, reap, "install: runner", "instal: runner")
    found = problems(copy)
    assert any("unknown input 'instal' (did you mean 'install'?)" in p for p in found), found
    pin = read_pin(PROJECT)
    copy = planted(
        tmp_path, reap, f"/.github/actions/setup@{pin.commit}", f"/.github/actions/setup@{'1' * 40}"
    )
    found = problems(copy)
    assert any(f"is not the pinned platform {pin.repository}@{pin.commit}" in p for p in found), found


def test_a_planted_missing_required_input_fails(tmp_path: Path) -> None:
    text = START.read_text(encoding="utf-8")
    region = re.search(r"^ +aws-region: .*\n", text, flags=re.MULTILINE)
    assert region, "gpu-runner-start.yml passes no aws-region"
    copy = planted(tmp_path, START, region.group(0), "")
    assert any("missing required input 'aws-region'" in p for p in problems(copy)), problems(copy)


def test_a_planted_unknown_pin_fails(tmp_path: Path) -> None:
    uses = next(uses for uses, _ in remote_uses() if uses in TRAIN.read_text(encoding="utf-8"))
    copy = planted(tmp_path, TRAIN, uses, uses[:-40] + "0" * 40)
    assert any("is not in actions.json" in p for p in problems(copy)), problems(copy)


def test_a_planted_output_the_action_lacks_fails(tmp_path: Path) -> None:
    expression = (
        "$" + "{" * 2 + " steps.co.outputs.sha " + "}" * 2
    )  # spelt out: this file is a Jinja template
    line = re.search(r"^ +uses: actions/checkout@.*\n", START.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert line, "gpu-runner-start.yml checks nothing out"
    copy = planted(tmp_path, START, line.group(0), line.group(0) + "        id: co\n")
    # A last step of the start job reads the output.
    copy.write_text(copy.read_text(encoding="utf-8").rstrip("\n") + f'\n      - run: echo "{expression}"\n')
    assert any("reads output 'sha' of step 'co'" in p for p in problems(copy)), problems(copy)


def test_a_planted_reusable_workflow_mismatch_fails(tmp_path: Path) -> None:
    """An input the called workflow does not declare, a secret it does not declare, and an output it lacks."""
    copy = planted(tmp_path, TRAIN, "      attempt: ", "      attempts: ")
    text = copy.read_text(encoding="utf-8")
    secret = "\n      MLFLOW_TRACKING_PASSWORD: "  # the stop job's `secrets:` (6 spaces: not a step's env)
    assert secret in text, "train.yml's stop job passes no MLflow password"
    text = text.replace(secret, secret.replace("PASSWORD", "PASSWORD_"), 1)
    text = text.replace("needs.start.outputs.region", "needs.start.outputs.regoin", 1)
    copy.write_text(text, encoding="utf-8")
    found = problems(copy)
    assert any("unknown input 'attempts' (did you mean 'attempt'?)" in p for p in found), found
    assert any("unknown secret 'MLFLOW_TRACKING_PASSWORD_'" in p for p in found), found
    assert any("reads output 'regoin' of job 'start'" in p for p in found), found


def test_a_double_with_an_input_the_real_action_lacks_fails(tmp_path: Path) -> None:
    name = sorted(doubled())[0]
    double = tmp_path / name
    double.mkdir()
    meta = yaml.safe_load((DOUBLES / name / "action.yml").read_text(encoding="utf-8"))
    meta["inputs"]["made-up"] = {"required": False, "default": ""}
    meta["outputs"] = {**(meta.get("outputs") or {}), "made-up-output": {"value": "x"}}
    (double / "action.yml").write_text(yaml.safe_dump(meta), encoding="utf-8")
    found = double_problems(double, doubled()[name], {"never-declared"})
    assert any("input 'made-up' is not the real action's" in p for p in found), found
    assert any("output 'made-up-output' is not the real action's" in p for p in found), found
    assert any("pass 'never-declared'" in p for p in found), found


def test_a_planted_unknown_run_step_output_fails(tmp_path: Path) -> None:
    """A key no code writes (launch's `instance-id` misspelt), and a step's own echo key misspelt."""
    copy = planted(tmp_path, START, "steps.launch.outputs.instance-id", "steps.launch.outputs.instance-idd")
    found = run_output_problems(copy)
    assert any(
        "reads output 'instance-idd' of step 'launch', which its code never writes" in p for p in found
    )
    copy = planted(tmp_path, TRAIN, "steps.timeline.outputs.boot-at", "steps.timeline.outputs.boots-at")
    found = run_output_problems(copy)
    assert any("reads output 'boots-at' of step 'timeline'" in p for p in found), found


def local_contract(action_yml: Path) -> Contract:
    """The same shape as the extracted contracts, read from an action.yml in this repository."""
    meta = yaml.safe_load(action_yml.read_text(encoding="utf-8"))
    inputs = {
        name: {
            "required": str((spec or {}).get("required", False)).lower() == "true",
            "default": "default" in (spec or {}),
        }
        for name, spec in (meta.get("inputs") or {}).items()
    }
    return {
        "runs_using": meta["runs"]["using"],
        "inputs": inputs,
        "outputs": sorted(meta.get("outputs") or {}),
    }


def resolve(uses: str, root: Path) -> tuple[Contract | None, str]:
    """The contract a `uses:` value refers to, or None and why not."""
    if uses.startswith("./"):
        path = root / uses / "action.yml"
        return (local_contract(path), "") if path.is_file() else (None, f"no {uses}/action.yml")
    if platform := PLATFORM_ACTION.match(uses):
        pin = read_pin(PROJECT)
        if (platform["repo"], platform["ref"]) != (pin.repository, pin.commit):
            return None, f"`{uses}` is not the pinned platform {pin.repository}@{pin.commit}"
        actions = platform_tree(PROJECT, PROJECT / ".e2e-cache") / ".github" / "actions"
        path = actions / platform["name"] / "action.yml"
        return (local_contract(path), "") if path.is_file() else (None, f"the pinned platform has no {uses}")
    match = REMOTE.match(uses)
    if not match:
        return None, f"`{uses}` is neither a local action nor owner/repo@sha (docker:// is not used here)"
    if not SHA.match(match["ref"]):
        return None, f"`{uses}` is not pinned to a full commit SHA"
    contract = CONTRACTS.get((match["repo"], match["ref"]))
    if contract is None:
        return (
            None,
            f"`{uses}` is not in {CONTRACTS_FILE.name}: run the template's extract_action_contracts.py",
        )
    return contract, ""


def called_contract(uses: str, root: Path) -> tuple[Contract | None, str]:
    """A reusable workflow of this repository as a contract: its `on.workflow_call` inputs, secrets, outputs.
    GitHub refuses a call that passes an input or secret the called workflow does not declare, or omits a
    required one ("Reusing workflows", docs.github.com, read 2026-12-01)."""
    remote, pin = CALLED.match(uses), read_pin(PROJECT)
    if remote and (remote["repo"], remote["ref"]) == (pin.repository, pin.commit):
        match, workflows = remote, PLATFORM_WORKFLOWS
    else:
        match = remote if remote and remote["repo"] == THIS_REPOSITORY else LOCAL_CALLED.match(uses)
        workflows = root / ".github" / "workflows"
    if not match:
        return None, (
            f"reusable workflow `{uses}` is neither one of {THIS_REPOSITORY}'s own nor the pinned platform's "
            f"({pin.repository}@{pin.commit})"
        )
    path = workflows / match["file"]
    if not path.is_file():
        return None, f"reusable workflow `{uses}`: no {path}"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    on = doc.get("on", doc.get(True)) or {}  # PyYAML reads the bare key `on` as True
    call = on.get("workflow_call") if isinstance(on, dict) else None
    if not isinstance(call, dict):
        return None, f"reusable workflow `{uses}`: {match['file']} has no `on: workflow_call`"

    def declared(kind: str) -> dict[str, Any]:
        return {
            name: {
                "required": bool((spec or {}).get("required", False)),
                "default": "default" in (spec or {}),
            }
            for name, spec in (call.get(kind) or {}).items()
        }

    contract = {
        "inputs": declared("inputs"),
        "secrets": declared("secrets"),
        "outputs": sorted(call.get("outputs") or {}),
    }
    return contract, ""


def call_problems(label: str, job: dict[str, Any], root: Path) -> list[str]:
    """A job-level `uses:`: the called workflow must exist and declare what the job passes."""
    contract, why = called_contract(job["uses"], root)
    if contract is None:
        return [f"{label}: {why}"]
    where = f"{label} ({job['uses']})"
    found = step_problems(where, job, contract)
    secrets = job.get("secrets") or {}
    if secrets == "inherit":
        return [*found, f"{where}: `secrets: inherit` hands every secret to the called workflow"]
    passed = step_problems(where, {"with": secrets}, {"inputs": contract["secrets"]})
    return found + [p.replace(" input ", " secret ") for p in passed]


def hint(name: str, inputs: dict[str, Any]) -> str:
    close = difflib.get_close_matches(name, inputs, n=1)
    return f"did you mean {close[0]!r}?" if close else f"the action's inputs: {', '.join(inputs)}"


def step_problems(label: str, step: dict[str, Any], contract: Contract) -> list[str]:
    given = set(step.get("with") or {})
    inputs = contract["inputs"]
    found = [
        f"{label}: unknown input {name!r} ({hint(name, inputs)})" for name in sorted(given - set(inputs))
    ]
    required = {name for name, spec in inputs.items() if spec["required"] and not spec["default"]}
    found += [f"{label}: missing required input {name!r}" for name in sorted(required - given)]
    found += [
        f"{label}: deprecated input {name!r}"
        for name in sorted(given)
        if inputs.get(name, {}).get("deprecated")
    ]
    return found


def problems(path: Path, root: Path = PROJECT) -> list[str]:
    """Everything wrong with the `uses:` of one workflow or composite action file."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    found = []
    called: dict[str, Contract] = {}
    for label, scope, steps in scopes(doc, path.name):
        if "uses" in scope and "steps" not in scope:
            found += call_problems(label, scope, root)
            contract, _ = called_contract(scope["uses"], root)
            if contract is not None:
                called[label.rsplit(" ", 1)[1]] = contract
        by_id: dict[str, Contract] = {}
        for index, step in enumerate(steps):
            if "uses" not in step:
                continue
            where = f"{label} step {step.get('name') or index} ({step['uses']})"
            contract, why = resolve(step["uses"], root)
            if contract is None:
                found.append(f"{where}: {why}")
                continue
            found += step_problems(where, step, contract)
            if "id" in step:
                by_id[step["id"]] = contract
        # Outputs are read anywhere in the scope (later steps' env, the job's outputs): they must exist.
        for step_id, output in OUTPUT_READ.findall(yaml.safe_dump(scope)):
            contract = by_id.get(step_id)
            if contract is not None and output not in contract["outputs"]:
                found.append(
                    f"{label}: reads output {output!r} of step {step_id!r}, which the action does not set"
                )
    # A called workflow's outputs are read as needs.<job>.outputs.<name>: it must declare them.
    for job_id, output in NEEDS_OUTPUT_READ.findall(yaml.safe_dump(doc.get("jobs") or {})):
        if job_id in called and output not in called[job_id]["outputs"]:
            found.append(f"{path.name}: reads output {output!r} of job {job_id!r}, which its workflow lacks")
    return found


def double_problems(double: Path, real: list[Contract], passed: set[str]) -> list[str]:
    mine = local_contract(double / "action.yml")
    found = []
    for contract in real:
        name = f"{double.name} double vs {contract['repo']}@{contract['version']}"
        found += [
            f"{name}: input {i!r} is not the real action's"
            for i in sorted(set(mine["inputs"]) - set(contract["inputs"]))
        ]
        found += [
            f"{name}: output {o!r} is not the real action's"
            for o in sorted(set(mine["outputs"]) - set(contract["outputs"]))
        ]
    found += [
        f"{double.name} double: the workflows pass {i!r}, which it does not declare"
        for i in sorted(passed - set(mine["inputs"]))
    ]
    return found


# ---------------------------------------------------------------------- planted mismatches: the check can fail
def run_step_outputs(script: str) -> set[str]:
    """The keys a `run:` script writes to $GITHUB_OUTPUT: its commands' constants and its own echo lines."""
    keys: set[str] = set()
    for command in GPU_RUNNER_COMMAND.findall(script):
        keys |= COMMAND_OUTPUTS.get(f"gpu-runner {command}", set())
    for command in PYTHON_COMMAND.findall(script):
        keys |= COMMAND_OUTPUTS.get(f"python {' '.join(command.split())}", set())
    arms = {arm.strip() for match in CASE_ARM.findall(script) for arm in match.split("|")}
    for key in SHELL_OUTPUT.findall(script):
        keys |= {key.replace("${name}", arm) for arm in arms} if "${name}" in key else {key}
    return keys


def run_output_problems(path: Path) -> list[str]:
    """Every `steps.<id>.outputs.<key>` of a `run:` step that the step's code does not write."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    found = []
    for label, scope, steps in scopes(doc, path.name):
        written = {
            step["id"]: run_step_outputs(step["run"]) for step in steps if "id" in step and "run" in step
        }
        for step_id, output in OUTPUT_READ.findall(yaml.safe_dump(scope)):
            if step_id in written and output not in written[step_id]:
                found.append(
                    f"{label}: reads output {output!r} of step {step_id!r}, which its code never writes"
                )
    return found


def planted(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    """A copy of a real workflow with one edit (its calls still resolve against PROJECT and its pin)."""
    text = source.read_text(encoding="utf-8")
    assert old in text, f"{source.name} no longer contains {old!r}: update the planted mismatch"
    copy = tmp_path / f"planted-{source.name}"
    copy.write_text(text.replace(old, new, 1), encoding="utf-8")
    return copy
