"""Every `uses:` of a workflow or composite action held to the contract of what it calls.

GitHub checks little of this at run time: an unknown `with:` key is only a warning in the log, and
`required: true` "will not automatically return an error if the input is not specified" (docs.github.com,
Metadata syntax reference, `inputs`, read 2026-12-01); a reusable workflow refuses an input or secret it does not
declare ("Reusing workflows", docs.github.com, read 2026-12-01). So a misspelt or renamed input silently does
nothing, and the first real push is where it shows. The contracts of the remote actions (input names, required,
default, outputs, runs.using) were read from each action's own action.yml at its pin: action_contracts.json.

A `run:` step's outputs are the contract of the code it runs: a workflow may read only the keys that code writes
(the constants of gpu_runner.core.workflow_contract, and a project's own commands' constants) or that the step's
own script appends to $GITHUB_OUTPUT.

One checker for the platform's workflows and actions (in the template repository) and a project's own workflows
(which call the platform's at the commit they pin): `Checker` is told which repository the files belong to and,
for a project, which platform commit it pins and where that commit's tree is.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import gpu_runner.core.workflow_contract as runner_contract
from gpu_runner_testing.workflow_checks.workflow_files import CONTRACTS_FILE

Contract = dict[str, Any]

# A call of the platform's composite action: `<owner>/<template>/.github/actions/<name>@<commit>`.
PLATFORM_ACTION = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)/\.github/actions/(?P<name>[\w.-]+)@(?P<ref>\S+)$")
REMOTE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)@(?P<ref>[^@\s]+)$")
# A job calling a reusable workflow: of the same repository, or of the platform at the pinned commit.
CALLED = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)/\.github/workflows/(?P<file>[\w.-]+\.ya?ml)@(?P<ref>\S+)$")
LOCAL_CALLED = re.compile(r"^\./\.github/workflows/(?P<file>[\w.-]+\.ya?ml)$")
NEEDS_OUTPUT_READ = re.compile(r"\bneeds\.([\w-]+)\.outputs\.([\w-]+)")
SHA = re.compile(r"^[0-9a-f]{40}$")
OUTPUT_READ = re.compile(r"\bsteps\.([\w-]+)\.outputs\.([\w-]+)")

# What each gpu-runner command a `run:` step calls writes to $GITHUB_OUTPUT: the code's own constants.
RUNNER_COMMAND_OUTPUTS: dict[str, set[str]] = {
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
}
GPU_RUNNER_COMMAND = re.compile(r"\bgpu-runner\s+--settings\s+\S+\s+((?:batch )?[\w-]+)")
PYTHON_COMMAND = re.compile(r"\bpython\s+-m\s+[\w.]+\s+((?:sweep\s+)?[\w-]+)")
# `echo "key=..." >> "${GITHUB_OUTPUT}"` in a step's own script; `${name}` stands for each arm of its `case`.
SHELL_OUTPUT = re.compile(r'echo\s+"([\w${}-]+)=[^"]*"\s*>>\s*"\$\{GITHUB_OUTPUT\}"')
CASE_ARM = re.compile(r"^\s*([\w-]+(?:\s*\|\s*[\w-]+)*)\)", re.MULTILINE)


def load_contracts(contracts_file: Path = CONTRACTS_FILE) -> dict[tuple[str, str], Contract]:
    """(owner/repo, sha) -> the contract read from that action's action.yml at that commit."""
    data = json.loads(contracts_file.read_text(encoding="utf-8"))
    return {(action["repo"], action["sha"]): action for action in data["actions"]}


def provenance_problems(contracts: Mapping[tuple[str, str], Contract]) -> list[str]:
    """Each contract says where it was read: at the pin itself, or (a snapshot older than the pin) at a release
    tag, marked NOT CHECKED."""
    found = []
    for (repo, sha), action in contracts.items():
        if action["snapshot"]["fetch"] != f"github:{repo}" or not SHA.match(action["snapshot"]["head"]):
            found.append(f"{repo}@{sha}: no snapshot named")
        if action["sha_in_snapshot"]:
            if action["read_at"] != sha:
                found.append(f"{repo}@{sha}: read at {action['read_at']}, not at the pin")
            if action["tag_commit"] not in (None, sha):  # where the snapshot has the tag, it is this commit
                found.append(f"{repo}: tag {action['version']} is not {sha}")
        elif not (action["note"].startswith("NOT CHECKED") and action["read_at_tag"]):
            found.append(f"{repo}@{sha}: not read at the pin, and not marked NOT CHECKED")
        if action["runs_using"] not in {"node24", "composite", "docker"}:
            found.append(f"{repo}@{action['version']}: runs.using {action['runs_using']}")
    return found


def local_contract(action_yml: Path) -> Contract:
    """The same shape as the extracted contracts, read from an action.yml at hand."""
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


def scopes(doc: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(label, the scope's whole mapping, its steps): each job of a workflow, or a composite action's steps."""
    if "jobs" in doc:
        for job_id, job in doc["jobs"].items():
            yield f"{where} job {job_id}", job, job.get("steps") or []
    elif isinstance(doc.get("runs"), dict) and doc["runs"].get("using") == "composite":
        yield f"{where} (composite)", doc, doc["runs"].get("steps") or []


def remote_uses(paths: list[Path]) -> list[tuple[str, dict[str, Any]]]:
    """(owner/repo@sha, step) of every remote action step in these workflows and composite actions."""
    found = []
    for path in paths:
        for _, _, steps in scopes(yaml.safe_load(path.read_text(encoding="utf-8")), path.name):
            found += [(step["uses"], step) for step in steps if REMOTE.match(step.get("uses", ""))]
    return found


def hint(name: str, inputs: dict[str, Any]) -> str:
    close = difflib.get_close_matches(name, inputs, n=1)
    return f"did you mean {close[0]!r}?" if close else f"the action's inputs: {', '.join(inputs)}"


def step_problems(label: str, step: dict[str, Any], contract: Contract) -> list[str]:
    """The step's `with:` against the inputs: unknown (with the closest name), required and missing, deprecated."""
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


def double_problems(double: Path, real: list[Contract], passed: set[str]) -> list[str]:
    """An act double (a local action standing in for a remote one) declares only what the real action has, and
    accepts every input the workflows pass."""
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


def passed_inputs(uses: list[tuple[str, dict[str, Any]]], name: str) -> set[str]:
    """The `with:` keys these steps pass to the remote action whose repository is called `name` (what its act
    double must accept)."""
    return {
        key
        for used, step in uses
        if used.split("@")[0].split("/")[1] == name
        for key in step.get("with") or {}
    }


def doubled(
    uses: list[tuple[str, dict[str, Any]]], contracts: Mapping[tuple[str, str], Contract]
) -> dict[str, list[Contract]]:
    """Double name (the repository's name) -> the contracts of the pins it stands in for."""
    pins: dict[str, list[Contract]] = {}
    for used, _ in uses:
        match = REMOTE.match(used)
        assert match is not None
        contract = contracts.get((match["repo"], match["ref"]))
        name = match["repo"].split("/")[1]
        if contract is not None and contract not in pins.setdefault(name, []):
            pins[name].append(contract)
    return pins


def run_step_outputs(script: str, command_outputs: Mapping[str, set[str]]) -> set[str]:
    """The keys a `run:` script writes to $GITHUB_OUTPUT: its commands' constants and its own echo lines."""
    keys: set[str] = set()
    for command in GPU_RUNNER_COMMAND.findall(script):
        keys |= command_outputs.get(f"gpu-runner {command}", set())
    for command in PYTHON_COMMAND.findall(script):
        keys |= command_outputs.get(f"python {' '.join(command.split())}", set())
    arms = {arm.strip() for match in CASE_ARM.findall(script) for arm in match.split("|")}
    for key in SHELL_OUTPUT.findall(script):
        keys |= {key.replace("${name}", arm) for arm in arms} if "${name}" in key else {key}
    return keys


def run_output_problems(
    path: Path, command_outputs: Mapping[str, set[str]] = RUNNER_COMMAND_OUTPUTS
) -> list[str]:
    """Every `steps.<id>.outputs.<key>` of a `run:` step that the step's code does not write."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    found = []
    for label, scope, steps in scopes(doc, path.name):
        written = {
            step["id"]: run_step_outputs(step["run"], command_outputs)
            for step in steps
            if "id" in step and "run" in step
        }
        for step_id, output in OUTPUT_READ.findall(yaml.safe_dump(scope)):
            if step_id in written and output not in written[step_id]:
                found.append(
                    f"{label}: reads output {output!r} of step {step_id!r}, which its code never writes"
                )
    return found


def commands_called(paths: list[Path], command_outputs: Mapping[str, set[str]]) -> dict[str, bool]:
    """Each command these files call that writes outputs -> whether any of the files reads one of them (so the
    output check has something to check for it)."""
    text = "\n".join(path.read_text(encoding="utf-8") for path in paths)
    read = {output for _, output in OUTPUT_READ.findall(text)}
    called = {f"gpu-runner {c}" for c in GPU_RUNNER_COMMAND.findall(text)}
    called |= {f"python {' '.join(c.split())}" for c in PYTHON_COMMAND.findall(text)}
    return {
        command: bool(command_outputs[command] & read) for command in sorted(called & set(command_outputs))
    }


@dataclass(frozen=True)
class Checker:
    """Resolves each `uses:` of one repository's files: `root` (its .github/), `repository` (owner/repo: a job
    that calls one of its own workflows by name), and for a project the platform it pins (`platform`:
    repository and commit) with that commit's tree (`platform_root`), whose actions and reusable workflows the
    project calls."""

    root: Path
    repository: str
    platform: tuple[str, str] | None = None
    platform_root: Path | None = None
    contracts: Mapping[tuple[str, str], Contract] = field(default_factory=load_contracts)

    def resolve(self, uses: str) -> tuple[Contract | None, str]:
        """The contract a step's `uses:` refers to, or None and why not."""
        if uses.startswith("./"):
            path = self.root / uses / "action.yml"
            return (local_contract(path), "") if path.is_file() else (None, f"no {uses}/action.yml")
        if platform := PLATFORM_ACTION.match(uses):
            if self.platform is None or self.platform_root is None:
                return None, f"`{uses}`: this repository pins no platform"
            if (platform["repo"], platform["ref"]) != self.platform:
                return None, f"`{uses}` is not the pinned platform {self.platform[0]}@{self.platform[1]}"
            path = self.platform_root / ".github" / "actions" / platform["name"] / "action.yml"
            return (
                (local_contract(path), "") if path.is_file() else (None, f"the pinned platform has no {uses}")
            )
        match = REMOTE.match(uses)
        if not match:
            return None, f"`{uses}` is neither a local action nor owner/repo@sha (docker:// is not used here)"
        if not SHA.match(match["ref"]):
            return None, f"`{uses}` is not pinned to a full commit SHA"
        contract = self.contracts.get((match["repo"], match["ref"]))
        if contract is None:
            return None, (
                f"`{uses}` is not in the pinned platform's {CONTRACTS_FILE.name}: keep the pin the platform has "
                "read, or take a platform release that reads the new one (make platform-update)"
            )
        return contract, ""

    def called_contract(self, uses: str) -> tuple[Contract | None, str]:
        """A called reusable workflow as a contract: its `on.workflow_call` inputs, secrets, outputs."""
        remote = CALLED.match(uses)
        if remote and self.platform_root is not None and (remote["repo"], remote["ref"]) == self.platform:
            match, workflows = remote, self.platform_root / ".github" / "workflows"
        else:
            match = remote if remote and remote["repo"] == self.repository else LOCAL_CALLED.match(uses)
            workflows = self.root / ".github" / "workflows"
        if not match:
            pinned = f"{self.platform[0]}@{self.platform[1]}" if self.platform else "none"
            return None, (
                f"reusable workflow `{uses}` is neither one of {self.repository}'s own nor the pinned "
                f"platform's ({pinned})"
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

        return {
            "inputs": declared("inputs"),
            "secrets": declared("secrets"),
            "outputs": sorted(call.get("outputs") or {}),
        }, ""

    def call_problems(
        self, label: str, job: dict[str, Any], called: tuple[Contract | None, str]
    ) -> list[str]:
        """A job-level `uses:` and its called_contract: the called workflow must exist and declare what the job
        passes."""
        contract, why = called
        if contract is None:
            return [f"{label}: {why}"]
        where = f"{label} ({job['uses']})"
        found = step_problems(where, job, contract)
        secrets = job.get("secrets") or {}
        if secrets == "inherit":
            return [*found, f"{where}: `secrets: inherit` hands every secret to the called workflow"]
        passed = step_problems(where, {"with": secrets}, {"inputs": contract["secrets"]})
        return found + [p.replace(" input ", " secret ") for p in passed]

    def problems(self, path: Path) -> list[str]:
        """Everything wrong with the `uses:` of one workflow or composite action file."""
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        found = []
        called: dict[str, Contract] = {}
        for label, scope, steps in scopes(doc, path.name):
            if "uses" in scope and "steps" not in scope:
                resolved = self.called_contract(scope["uses"])
                found += self.call_problems(label, scope, resolved)
                if resolved[0] is not None:
                    called[label.rsplit(" ", 1)[1]] = resolved[0]
            by_id: dict[str, Contract] = {}
            for index, step in enumerate(steps):
                if "uses" not in step:
                    continue
                where = f"{label} step {step.get('name') or index} ({step['uses']})"
                contract, why = self.resolve(step["uses"])
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
                found.append(
                    f"{path.name}: reads output {output!r} of job {job_id!r}, which its workflow lacks"
                )
        return found


def planted(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    """A copy of a real workflow with one edit, beside the original's resolution (a negative control)."""
    text = source.read_text(encoding="utf-8")
    assert old in text, f"{source.name} no longer contains {old!r}: update the planted mismatch"
    copy = tmp_path / f"planted-{source.name}"
    copy.write_text(text.replace(old, new, 1), encoding="utf-8")
    return copy
