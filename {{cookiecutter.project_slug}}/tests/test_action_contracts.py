"""Every `uses:` of the workflows and composite actions respects the used action's own contract.

GitHub checks little of this at run time: an unknown `with:` key is only a warning in the log, and
`required: true` "will not automatically return an error if the input is not specified" (docs.github.com,
Metadata syntax reference, `inputs`, read 2026-12-01). So a misspelt or renamed input silently does nothing, and
the first real push is where it shows. The contracts (input names, required, default, outputs, runs.using) were
read from each action's own action.yml at its pinned SHA and are kept in tests/contracts/actions.json, with where
they were read; an entry with `sha_in_snapshot: false` could not be read at the pin (see its note), and its
contract is that of the newest release the snapshot had: evidence, not proof.

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

PROJECT = Path(__file__).resolve().parents[1]
CONTRACTS_FILE = PROJECT / "tests" / "contracts" / "actions.json"
DOUBLES = PROJECT / "tests" / "e2e" / "actions"
WORKFLOWS = sorted((PROJECT / ".github" / "workflows").glob("*.yml"))
COMPOSITES = sorted((PROJECT / ".github" / "actions").glob("*/action.yml"))
REMOTE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)@(?P<ref>[^@\s]+)$")
SHA = re.compile(r"^[0-9a-f]{40}$")
OUTPUT_READ = re.compile(r"\bsteps\.([\w-]+)\.outputs\.([\w-]+)")

Contract = dict[str, Any]


def load_contracts() -> dict[tuple[str, str], Contract]:
    data = json.loads(CONTRACTS_FILE.read_text(encoding="utf-8"))
    return {(action["repo"], action["sha"]): action for action in data["actions"]}


CONTRACTS = load_contracts()


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


def scopes(doc: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(label, the scope's whole mapping, its steps): each job of a workflow, or a composite action's steps."""
    if "jobs" in doc:
        for job_id, job in doc["jobs"].items():
            yield f"{where} job {job_id}", job, job.get("steps") or []
    elif isinstance(doc.get("runs"), dict) and doc["runs"].get("using") == "composite":
        yield f"{where} (composite)", doc, doc["runs"].get("steps") or []


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
    for label, scope, steps in scopes(doc, path.name):
        if "uses" in scope and "steps" not in scope:
            found.append(f"{label}: reusable workflow `{scope['uses']}` is not covered by the contracts")
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
    return found


def remote_uses() -> list[tuple[str, dict[str, Any]]]:
    """(owner/repo@sha, step) of every remote action step in the workflows and composite actions."""
    found = []
    for path in [*WORKFLOWS, *COMPOSITES]:
        for _, _, steps in scopes(yaml.safe_load(path.read_text(encoding="utf-8")), path.name):
            found += [(step["uses"], step) for step in steps if REMOTE.match(step.get("uses", ""))]
    return found


# ---------------------------------------------------------------------- the real files
@pytest.mark.parametrize("path", [*WORKFLOWS, *COMPOSITES], ids=lambda p: str(p.relative_to(PROJECT)))
def test_every_uses_respects_the_action_contract(path: Path) -> None:
    assert problems(path) == []


def test_every_workflow_and_composite_action_is_checked() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "train.yml", "reap.yml"}
    assert COMPOSITES, "no .github/actions/*/action.yml found"
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


@pytest.mark.parametrize("name", sorted(doubled()))
def test_each_double_declares_only_what_the_real_action_has(name: str) -> None:
    passed = {
        key
        for uses, step in remote_uses()
        if uses.split("@")[0].split("/")[1] == name
        for key in step.get("with") or {}
    }
    assert double_problems(DOUBLES / name, doubled()[name], passed) == []


# ---------------------------------------------------------------------- planted mismatches: the check can fail
def planted(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    """A copy of a real workflow with one edit (`./.github/actions/...` still resolve against PROJECT)."""
    text = source.read_text(encoding="utf-8")
    assert old in text, f"{source.name} no longer contains {old!r}: update the planted mismatch"
    copy = tmp_path / f"planted-{source.name}"
    copy.write_text(text.replace(old, new, 1), encoding="utf-8")
    return copy


TRAIN = PROJECT / ".github" / "workflows" / "train.yml"


def test_a_planted_unknown_input_fails(tmp_path: Path) -> None:
    copy = planted(
        tmp_path, TRAIN, "role-session-name: gpu-runner-start-", "role-session-nam: gpu-runner-start-"
    )
    found = problems(copy)
    assert any("unknown input 'role-session-nam' (did you mean 'role-session-name'?)" in p for p in found), (
        found
    )


def test_a_planted_missing_required_input_fails(tmp_path: Path) -> None:
    text = TRAIN.read_text(encoding="utf-8")
    region = re.search(r"^ +aws-region: .*\n", text, flags=re.MULTILINE)
    assert region, "train.yml passes no aws-region"
    copy = planted(tmp_path, TRAIN, region.group(0), "")
    assert any("missing required input 'aws-region'" in p for p in problems(copy)), problems(copy)


def test_a_planted_unknown_pin_fails(tmp_path: Path) -> None:
    uses = next(uses for uses, _ in remote_uses() if uses in TRAIN.read_text(encoding="utf-8"))
    copy = planted(tmp_path, TRAIN, uses, uses[:-40] + "0" * 40)
    assert any("is not in actions.json" in p for p in problems(copy)), problems(copy)


def test_a_planted_output_the_action_lacks_fails(tmp_path: Path) -> None:
    checkout = "        with:\n          persist-credentials: false\n"
    expression = (
        "$" + "{" * 2 + " steps.co.outputs.sha " + "}" * 2
    )  # spelt out: this file is a Jinja template
    read = f'        id: co\n{checkout}      - run: echo "{expression}"\n'
    copy = planted(tmp_path, TRAIN, checkout, read)
    assert any("reads output 'sha' of step 'co'" in p for p in problems(copy)), problems(copy)


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
