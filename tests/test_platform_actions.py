"""The platform's composite actions, where they live: this repository's .github/actions/ (issue 31). A bake
calls them as `<owner>/<template>/.github/actions/<name>@<commit>`, at the commit its uv.lock pins the
gpu-runner distribution at; its own suite checks its calls against the action.yml at that commit
(tests/test_action_contracts.py, tests/workflows/). What the actions themselves run is checked here, once: the
linters a bake runs on its own GitHub files (zizmor with both personas, the action schema, shellcheck, the
structural rules and the pin table), what each install mode of setup runs, and that the tunnel role's
credentials never become the job's (every `with:` against the called action's contract:
tests/test_platform_action_contracts.py).
"""

from __future__ import annotations

import copy
import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from gpu_runner_testing.workflow_checks.planted_violations import BAD_ACTION
from gpu_runner_testing.workflow_checks.step_scripts import run_bash
from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    CONTRACTS_FILE,
    as_expression,
    load_pins,
    load_yaml,
)
from gpu_runner_testing.workflow_checks.workflow_linters import (
    check_jsonschema,
    describe_zizmor,
    shellcheck_action,
    zizmor,
)
from gpu_runner_testing.workflow_checks.workflow_rules import expressions_in_run, uses_problems

REPO_ROOT = Path(__file__).resolve().parents[1]
ACTIONS = sorted((REPO_ROOT / ".github" / "actions").glob("*/action.yml"))
SETUP = REPO_ROOT / ".github" / "actions" / "setup" / "action.yml"
TUNNEL = REPO_ROOT / ".github" / "actions" / "mlflow-tunnel" / "action.yml"


def test_the_platform_has_its_two_actions() -> None:
    assert ACTIONS == [TUNNEL, SETUP]


# ---------------------------------------------------------------- the linters a bake runs on its own files
@pytest.mark.parametrize("persona", ["regular", "auditor"])
def test_zizmor_finds_nothing(persona: str) -> None:
    code, findings = zizmor(ACTIONS, REPO_ROOT, persona=persona)
    assert (code, findings) == (0, []), describe_zizmor(findings)


def test_the_action_schema_accepts_them() -> None:
    proc = check_jsonschema("vendor.github-actions", ACTIONS)
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}"


def test_shellcheck_finds_nothing_and_catches_a_planted_finding(tmp_path: Path) -> None:
    assert [problem for action in ACTIONS for problem in shellcheck_action(action)] == []
    bad = tmp_path / "action.yml"
    bad.write_text(BAD_ACTION, encoding="utf-8")
    assert any("SC2086" in problem for problem in shellcheck_action(bad))


def test_every_remote_action_is_pinned_from_the_pin_table_with_its_version() -> None:
    pins = load_pins(CONTRACTS_FILE)
    assert [f"{a.parent.name}: {p}" for a in ACTIONS for p in uses_problems(a, load_yaml(a), pins)] == []


def test_the_platforms_own_dependabot_keeps_every_action_current() -> None:
    config = load_yaml(REPO_ROOT / ".github" / "dependabot.yml")
    (update,) = config["updates"]
    assert update["package-ecosystem"] == "github-actions"
    dirs = {"/" + action.parent.relative_to(REPO_ROOT).as_posix() for action in ACTIONS}
    assert {"/", *dirs} <= set(update["directories"])
    proc = check_jsonschema("vendor.dependabot", [REPO_ROOT / ".github" / "dependabot.yml"])
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}"


# ---------------------------------------------------------------- setup: what each install mode runs
def test_setup_action_meaning(tmp_path: Path) -> None:
    action = load_yaml(SETUP)
    assert action["runs"]["using"] == "composite"
    inputs = {name: spec["default"] for name, spec in action["inputs"].items()}
    assert inputs == {"install": "project", "extra": "cpu", "python-version": "3.11", "enable-cache": "true"}
    check_step, uv_step, sync_step = action["runs"]["steps"]
    assert uv_step["uses"].startswith("astral-sh/setup-uv@")
    assert uv_step["with"] == {
        # Pinned (issue 13, item 8): without it setup-uv installs the latest uv release at every run.
        "version": "0.13.9",
        "enable-cache": "${{ inputs.enable-cache }}",
        "python-version": "${{ inputs.python-version }}",
        "cache-dependency-glob": "uv.lock",
    }
    # Inputs reach the shell through env only.
    assert check_step["env"] == {
        "INSTALL": "${{ inputs.install }}",
        "ENABLE_CACHE": "${{ inputs.enable-cache }}",
    }
    assert sync_step["env"] == {"INSTALL": "${{ inputs.install }}", "EXTRA": "${{ inputs.extra }}"}
    assert not expressions_in_run(action)

    # What each mode really runs (uv replaced by a recorder that prints what `uv run` should print).
    counter = itertools.count()

    def install(mode: str, *, uv_prints: str = "") -> tuple[int, list[list[str]]]:
        env = {"INSTALL": mode, "ENABLE_CACHE": "false", "EXTRA": "cpu"}
        workdir = tmp_path / f"{mode}-{next(counter)}"
        code_check, _ = run_bash(check_step["run"], env, workdir / "check")
        code, calls = run_bash(sync_step["run"], env, workdir / "sync", uv_prints=uv_prints)
        return code_check or code, calls

    assert install("project") == (0, [["sync", "--locked", "--extra", "cpu"]])
    assert install("runner") == (0, [["sync", "--locked", "--only-group", "runner"]])
    code, calls = install("image", uv_prints="2.15.0\n")
    assert code == 0, calls
    venv, sync, check_tf = calls
    # A venv on the image's own Python that sees its site-packages (TensorFlow), then no TensorFlow extra.
    assert venv[:3] == ["venv", "--system-site-packages", "--python"] and Path(venv[3]).name == "python3"
    assert sync == ["sync", "--locked", "--no-dev"]
    assert check_tf[:4] == ["run", "--no-sync", "python", "-c"] and "tensorflow" in check_tf[4]
    # Negative controls: no TensorFlow 2.15 visible from the venv, an unknown mode.
    assert install("image", uv_prints="2.16.1\n")[0] != 0
    assert install("everything")[0] != 0

    # `gpu` (GPU runner, host mode): the locked gpu extra when python3 has no TensorFlow 2.15 (the AMI)...
    assert install("gpu") == (0, [["sync", "--locked", "--extra", "gpu", "--no-dev"]])
    # ...and python3's own TensorFlow 2.15 when it has one (a TF image as the job's container, a project AMI).
    image_python = tmp_path / "image-python"
    image_python.mkdir()
    (image_python / "python3").write_text("#!/bin/sh\necho True\n", encoding="utf-8")
    (image_python / "python3").chmod(0o755)
    env = {"INSTALL": "gpu", "ENABLE_CACHE": "false", "EXTRA": "cpu"}
    env["PATH"] = os.pathsep.join(
        [str(tmp_path / "gpu-image" / "bin"), str(image_python), "/usr/bin", "/bin"]
    )
    code, calls = run_bash(sync_step["run"], env, tmp_path / "gpu-image", uv_prints="2.15.0\n")
    assert code == 0, calls
    assert calls[0] == ["venv", "--system-site-packages", "--python", str(image_python / "python3")]
    assert calls[1] == ["sync", "--locked", "--no-dev"]


# ---------------------------------------------------------------- mlflow-tunnel: the role stays in the action


def tunnel_action() -> dict[str, Any]:
    return load_yaml(TUNNEL)


def credential_problems(action: dict[str, Any]) -> list[str]:
    steps = action["runs"]["steps"]
    configure = [s for s in steps if str(s.get("uses", "")).startswith(AWS_CREDENTIALS + "@")]
    problems = []
    if len(configure) != 1:
        return [f"{len(configure)} credentials steps, not one"]
    options = configure[0].get("with", {})
    if options.get("output-env-credentials") != "false" or options.get("output-credentials") != "true":
        problems.append("the tunnel role's credentials reach the job's environment")
    users = [s for s in steps if "steps.credentials.outputs" in str(s.get("env", {}))]
    if [s.get("id") for s in users] != ["connect"]:
        problems.append(f"the credentials reach steps {[s.get('id') for s in users]}, not connect alone")
    if any("GITHUB_ENV" in str(s.get("run", "")) for s in steps):
        problems.append("a step writes GITHUB_ENV")
    return problems


def test_the_tunnel_credentials_stay_in_the_connect_step() -> None:
    action = tunnel_action()
    assert credential_problems(action) == []
    assert action["outputs"]["tracking-uri"]["value"] == as_expression(
        "steps.connect.outputs.tracking-uri || inputs.tracking-uri"
    )
    connect = next(s for s in action["runs"]["steps"] if s.get("id") == "connect")
    assert "mlflow-server connect" in connect["run"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s[0]["with"].update({"output-env-credentials": "true"}), "reach the job's environment"),
        (
            lambda s: s[1].update({"run": s[1]["run"] + '\necho "AWS_ACCESS_KEY_ID=x" >> "$GITHUB_ENV"'}),
            "GITHUB_ENV",
        ),
    ],
    ids=["credentials exported", "written to GITHUB_ENV"],
)
def test_the_credential_check_catches_a_leak(change: Any, problem: str) -> None:
    action = copy.deepcopy(tunnel_action())
    change(action["runs"]["steps"])
    assert any(problem in p for p in credential_problems(action))
