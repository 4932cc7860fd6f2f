"""The story's support that a project's `make story` and `make e2e` lean on without running here: which project a
story runs, the e2e report several workers write, and the package data the story and the workflow checks read
from the installed platform (the act doubles of the remote actions, the pinned actions' contracts). The stories
themselves run in a generated project, against its own workflows (the template repository's generated tier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpu_runner_testing.story import ACTION_DOUBLES, report
from gpu_runner_testing.story.project import project_root
from gpu_runner_testing.workflow_checks.workflow_files import CONTRACTS_FILE, load_pins


def a_project(root: Path) -> Path:
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    return root


def test_the_story_runs_the_project_pytest_runs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = a_project(tmp_path / "team-project")
    (project / "tests" / "e2e").mkdir(parents=True)
    monkeypatch.chdir(project / "tests" / "e2e")
    assert project_root() == project
    assert project_root(project) == project


def test_outside_a_project_the_story_says_where_to_run_it(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")  # a Python project without workflows
    with pytest.raises(RuntimeError, match=r"no generated project at or above .*make e2e"):
        project_root(tmp_path)


def test_the_report_keeps_this_runs_rows_in_scenario_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = a_project(tmp_path / "p")
    monkeypatch.chdir(project)
    monkeypatch.setenv(report.RUN, "run-1")
    report.record("faults", {"scenario": "10 spot notice", "outcome": "resumed"})
    report.record("faults", {"scenario": "2 launch refused", "outcome": "failed"})
    report.record("faults", {"scenario": "10 spot notice", "outcome": "resumed twice"})  # a re-run replaces
    report.record("timeline", {"launch": 1.5})
    written = json.loads((project / ".e2e-cache" / "report.json").read_text(encoding="utf-8"))
    assert [row["scenario"] for row in written["faults"]] == ["2 launch refused", "10 spot notice"]
    assert written["faults"][1]["outcome"] == "resumed twice"
    assert "launch" in report.render(report.this_run())
    monkeypatch.setenv(report.RUN, "run-2")  # a later pytest run prints nothing it did not write
    assert report.this_run() == {}


def test_the_act_doubles_ship_with_the_platform() -> None:
    doubles = {
        path.parent.name: yaml.safe_load(path.read_text(encoding="utf-8"))
        for path in ACTION_DOUBLES.glob("*/action.yml")
    }
    assert sorted(doubles) == ["checkout", "configure-aws-credentials", "setup-uv", "upload-artifact"]
    assert {name: double["runs"]["using"] for name, double in doubles.items()} == dict.fromkeys(
        doubles, "composite"
    )


def test_the_action_contracts_ship_with_the_platform() -> None:
    pins = load_pins(CONTRACTS_FILE)
    assert {"actions/checkout", "astral-sh/setup-uv", "aws-actions/configure-aws-credentials"} <= {
        repo for repo, _ in pins
    }
    assert all(len(sha) == 40 and version.startswith("v") for (_, sha), version in pins.items())
