"""The platform's action_contracts.json covers every pin and is what the extraction script writes.

The generated project's own test_action_contracts.py checks the workflows against that data offline; these
tests keep the data honest from the template side: no pin without a contract, and (where the action snapshots
are at hand) a re-extraction gives the committed file byte for byte, so a hand edit or a stale file shows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "{{cookiecutter.project_slug}}"
DATA = ROOT / "platform" / "src" / "gpu_runner_testing" / "workflow_checks" / "action_contracts.json"
SCRIPT = ROOT / "scripts" / "extract_action_contracts.py"
# Bare git snapshots of the action repositories, <owner>+<repo>/repo, in the directory ACTION_MIRROR names
# (nothing on a fresh machine: the re-extraction test then skips, saying how to provide one).
MIRROR = os.environ.get("ACTION_MIRROR", "")
PIN = re.compile(r"uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40})")


def committed() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_every_pin_has_a_contract() -> None:
    have = {(a["repo"], a["sha"]) for a in committed()["actions"]}
    github = PROJECT / ".github"
    sources = [*(github / "workflows").glob("*.yml"), *(github / "actions").glob("*/action.yml")]
    used = {m.groups() for path in sources for m in PIN.finditer(path.read_text(encoding="utf-8"))}
    team = {
        (p["action"], p["sha"]) for p in json.loads((ROOT / "tests" / "action_pins.json").read_text())["pins"]
    }
    assert used, "no pinned action found in the generated workflows"
    assert used | team <= have, sorted((used | team) - have)


def test_the_data_has_no_jinja() -> None:
    # The file is baked with the template: `{{` would be rendered (or fail) instead of copied.
    assert "{{" not in DATA.read_text(encoding="utf-8") and "{%" not in DATA.read_text(encoding="utf-8")


def test_reextraction_gives_the_committed_file(tmp_path: Path) -> None:
    if not MIRROR:
        pytest.skip(
            "ACTION_MIRROR is not set: point it at a directory of bare clones of the pinned actions, "
            "<dir>/<owner>+<repo>/repo (git clone --bare https://github.com/<owner>/<repo> ...)"
        )
    mirror = Path(MIRROR)
    repos = {a["repo"] for a in committed()["actions"]}
    missing = [r for r in sorted(repos) if not (mirror / r.replace("/", "+") / "repo").is_dir()]
    if missing:
        pytest.skip(f"ACTION_MIRROR={mirror} holds no snapshot of {', '.join(missing)} (<owner>+<repo>/repo)")
    out = tmp_path / "actions.json"
    read_on = committed()["read_on"]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--mirror", str(mirror), "--output", str(out), "--read-on", read_on],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert out.read_text(encoding="utf-8") == DATA.read_text(encoding="utf-8")
