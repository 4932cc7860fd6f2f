"""Bake the defaults and run their `make e2e`: the real train.yml under act against local AWS, GitHub and
MLflow, the happy story and every fault scenario. The fault scenarios and the security stories are the
platform's (gpu_runner_testing.story.platform_stories, which the bake's `make e2e` collects from the installed
platform): this is where they run against a bake in this repository's CI. Reads the report the stories write
and checks its figures."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import bake_template, write_config
from cookiecutter.main import cookiecutter
from test_generated_project import make

ROOT = Path(__file__).resolve().parent.parent
# Fault scenarios 1-15 (gpu_runner_testing.story.stories), the hijack story (16, test_hijack_story.py) and the
# foreign stop story (17, test_foreign_stop_story.py), all three in gpu_runner_testing.story.platform_stories.
SCENARIOS = 17

pytestmark = pytest.mark.e2e


def test_baked_defaults_run_the_offline_story_and_survive_every_fault(tmp_path: Path) -> None:
    project = Path(
        cookiecutter(
            str(bake_template()), no_input=True, output_dir=str(tmp_path),
            config_file=str(write_config(tmp_path / "cookiecutter")),
        )
    )  # fmt: skip
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    make(project, "install")
    # 30 min: with six sweep stories the baked `make e2e` took over 20 min on a clean clone with 2 cores
    # (issue 15's note); .ci/run starts this tier only before minute 22, so the run stays inside its 45.
    result = make(project, "e2e", "PYTEST_ARGS=-p no:cacheprovider", timeout=1800)
    print(result.stdout[result.stdout.find("e2e report") - 40 :])

    report = json.loads((project / ".e2e-cache" / "report.json").read_text())
    rows = report["faults"]
    assert [int(r["scenario"].split()[0]) for r in rows] == list(range(1, SCENARIOS + 1)), rows
    for row in rows:
        assert (row["instances left"], row["runners left"], row["params left"]) == (0, 0, 0), row
        assert row["epochs lost"] in {"-", "0", "1"}, row
    timeline = report["timeline"]
    assert 0 < timeline["runner exit -> terminate call done"] <= 5.0, timeline
    assert report["story"]["metrics"]["test_accuracy"] > 0.5
    # The printed table is the one in the report.
    assert "fault injection:" in result.stdout and rows[-1]["scenario"] in result.stdout
