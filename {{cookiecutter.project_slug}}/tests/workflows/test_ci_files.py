"""What the CPU-side GitHub files mean: ci.yml calls the Makefile's targets through the platform's setup action,
Dependabot keeps the pins and the lock current and leaves the platform's pin to `make platform-update`. (What the
setup action itself runs is tested where it lives, in the template repository: tests/test_platform_actions.py.)"""

from __future__ import annotations

from pathlib import Path

from gpu_runner_testing.workflow_checks.workflow_files import (
    SETUP_ACTION,
    load_yaml,
    make_targets,
    step_uses,
    triggers,
)

from gpu_runner.pin.project_pin import read_pin


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
        assert step_uses(steps[1]) == SETUP_ACTION
        assert [s["run"] for s in steps if "run" in s] == runs
        assert {r.split()[1] for r in runs} <= targets
        assert all("${{" not in s.get("run", "") for s in steps)


def test_dependabot_meaning(project: Path, project_files: dict[str, list[Path]]) -> None:
    config = load_yaml(project / ".github" / "dependabot.yml")
    by_ecosystem = {u["package-ecosystem"]: u for u in config["updates"]}
    assert set(by_ecosystem) == {"github-actions", "uv"}
    action_dirs = {"/" + a.parent.relative_to(project).as_posix() for a in project_files["actions"]}
    assert {"/", *action_dirs} <= set(by_ecosystem["github-actions"]["directories"])
    assert by_ecosystem["uv"]["directory"] == "/"
    # The platform's pin moves only with `make platform-update` (workflows, lock and changelog together): neither
    # the lock's gpu-runner nor the workflows' calls of the platform's actions (as a whole repository and as
    # sub-path actions) may be moved by a bot on their own.
    assert {"dependency-name": "gpu-runner"} in by_ecosystem["uv"].get("ignore", [])
    platform = read_pin(project).repository
    ignored = {rule["dependency-name"] for rule in by_ecosystem["github-actions"].get("ignore", [])}
    assert ignored >= {platform, f"{platform}/*"}, ignored
    for update in by_ecosystem.values():
        assert update["schedule"]["interval"] == "weekly"
        assert update["groups"], "updates must be grouped"
