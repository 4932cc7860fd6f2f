"""What the CPU-side GitHub files mean: ci.yml calls the Makefile's targets, the setup action installs what
each mode needs (run under bash with uv recorded), Dependabot keeps the pins and the lock current."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from step_scripts import run_bash
from workflow_files import SETUP_ACTION, load_yaml, make_targets, triggers
from workflow_rules import expressions_in_run


def test_ci_meaning(project: Path) -> None:
    ci = load_yaml(project / ".github" / "workflows" / "ci.yml")
    assert triggers(ci) == {"push", "pull_request"}
    assert ci["concurrency"] == {
        "group": "${{ github.workflow }}-${{ github.ref }}",
        "cancel-in-progress": "${{ github.event_name == 'pull_request' }}",
    }
    targets = make_targets(project / "Makefile")
    expected_runs = {
        "lint": ["make lock-check", "make lint"],
        "test": ["make test"],
        "test-slow": ["make test-slow"],
    }
    assert set(ci["jobs"]) == set(expected_runs)
    for job_id, runs in expected_runs.items():
        job = ci["jobs"][job_id]
        assert job["runs-on"] == "ubuntu-latest"
        assert job["permissions"] == {"contents": "read"}
        steps = job["steps"]
        assert steps[0]["uses"].startswith("actions/checkout@")
        assert steps[1]["uses"] == SETUP_ACTION
        assert [s["run"] for s in steps if "run" in s] == runs
        assert {r.split()[1] for r in runs} <= targets
        assert all("${{" not in s.get("run", "") for s in steps)


def test_setup_action_meaning(project: Path, tmp_path: Path) -> None:
    action = load_yaml(project / ".github" / "actions" / "setup" / "action.yml")
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


def test_dependabot_meaning(project: Path, project_files: dict[str, list[Path]]) -> None:
    config = load_yaml(project / ".github" / "dependabot.yml")
    by_ecosystem = {u["package-ecosystem"]: u for u in config["updates"]}
    assert set(by_ecosystem) == {"github-actions", "uv"}
    action_dirs = {"/" + a.parent.relative_to(project).as_posix() for a in project_files["actions"]}
    assert {"/", *action_dirs} <= set(by_ecosystem["github-actions"]["directories"])
    assert by_ecosystem["uv"]["directory"] == "/"
    # The platform's pin moves only with `make platform-update` (workflows, lock and changelog together).
    assert {"dependency-name": "gpu-runner"} in by_ecosystem["uv"].get("ignore", [])
    for update in by_ecosystem.values():
        assert update["schedule"]["interval"] == "weekly"
        assert update["groups"], "updates must be grouped"
