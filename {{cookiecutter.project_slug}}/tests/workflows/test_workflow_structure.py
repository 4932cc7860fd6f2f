"""The structural rules of the platform's workflow_rules hold for this project's workflows and actions, and
catch every planted violation; no self-hosted runner is reachable from a pull request; no expression inside a
`run:`."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpu_runner_testing.workflow_checks.workflow_files import (
    GITHUB_HOSTED_RE,
    PR_EVENTS,
    answers_of,
    load_yaml,
    platform_call_problems,
    triggers,
)
from gpu_runner_testing.workflow_checks.workflow_rules import (
    expressions_in_run,
    uses_problems,
    workflow_problems,
)

from gpu_runner.pin.project_pin import read_pin


def test_structure_of_the_workflows_and_actions(
    project_files: dict[str, list[Path]], pins: dict[tuple[str, str], str]
) -> None:
    problems = [f"{p.name}: {msg}" for p in project_files["workflows"] for msg in workflow_problems(p, pins)]
    for action in project_files["actions"]:
        problems += [f"{action}: {msg}" for msg in uses_problems(action, load_yaml(action), pins)]
    assert not problems, "\n".join(problems)


def test_every_platform_call_names_the_locks_pin(project: Path) -> None:
    """The workflows call the platform's actions at the commit uv.lock installs the gpu-runner distribution from:
    a workflow pinned elsewhere would run one platform's actions with another's code."""
    answers = answers_of(project)
    assert platform_call_problems(project, f"{answers['github_owner']}/{answers['github_repo']}") == []


def test_a_platform_call_off_the_pin_fails(project: Path, tmp_path: Path) -> None:
    copy = tmp_path / project.name
    shutil.copytree(project / ".github", copy / ".github")
    shutil.copy(project / "pyproject.toml", copy / "pyproject.toml")
    ci = copy / ".github" / "workflows" / "ci.yml"
    pin = read_pin(project)
    ci.write_text(ci.read_text(encoding="utf-8").replace(pin.commit, "0" * 40, 1), encoding="utf-8")
    answers = answers_of(project)
    problems = platform_call_problems(copy, f"{answers['github_owner']}/{answers['github_repo']}")
    assert len(problems) == 1 and f"@{'0' * 40} is not the pinned platform" in problems[0], problems


def test_structure_negative_control(bad_project: Path, pins: dict[tuple[str, str], str]) -> None:
    problems = "\n".join(workflow_problems(bad_project / ".github" / "workflows" / "bad.yml", pins))
    for expected in (
        "pull_request_target",
        "top-level permissions must be {}",
        "jobs.build: permissions must be an explicit mapping",
        "jobs.build: no timeout-minutes",
        "self-hosted runners must never run pull request code",
        "actions/checkout@v4 is not pinned to a full commit SHA",
        "actions/checkout without persist-credentials: false",
        "must carry the version comment `# v10.2.0`",
        "actions/cache@0123456789abcdef0123456789abcdef01234567 is not in the pin table",
        "jobs.build.steps[4]: `${{` inside run:",
        'jobs.aws.steps[1]: platform:actions/setup without enable-cache: "false"',
        "jobs.aws.steps[2]: actions/setup-python with a cache",
        "jobs.aws.steps[3]: actions/cache in a job",
    ):
        assert expected in problems, f"structure check missed {expected!r}:\n{problems}"


def _callers(workflows: list[Path], name: str) -> set[str]:
    """The workflows of this project whose jobs call ./.github/workflows/<name>."""
    return {
        path.name
        for path in workflows
        for job in load_yaml(path)["jobs"].values()
        if str(job.get("uses", "")).split(" ")[0] == f"./.github/workflows/{name}"
    }


def test_no_self_hosted_runner_reachable_from_pull_requests(project_files: dict[str, list[Path]]) -> None:
    """Across the whole project: a workflow with a job on a runner that is not a literal GitHub-hosted label
    has only triggers that need write access (never pull_request*, workflow_run, ...). A called workflow
    (sweep-trial.yml) counts as its callers: each must keep the rule, and it may be called by nothing else."""
    workflows = project_files["workflows"]
    gpu_workflow_names = set()
    for path in workflows:
        doc = load_yaml(path)
        # A job that calls a workflow runs nothing itself: the called file's jobs are checked as its own.
        for job in (j for j in doc["jobs"].values() if "uses" not in j):
            runs_on = job.get("runs-on")
            labels = runs_on if isinstance(runs_on, list) else [runs_on]
            if not all(isinstance(x, str) and GITHUB_HOSTED_RE.match(x) for x in labels):
                gpu_workflow_names.add(path.name)
                if triggers(doc) == {"workflow_call"}:
                    callers = _callers(workflows, path.name)
                    assert callers == {"sweep.yml"}, (path.name, callers)
                    caller = load_yaml(path.parent / "sweep.yml")
                    assert triggers(caller) <= {"push", "workflow_dispatch"}, triggers(caller)
                else:
                    # predict.yml's optional schedule runs the default branch's copy: no pull request reaches it.
                    allowed = {"push", "workflow_dispatch"} | (
                        {"schedule"} if path.name == "predict.yml" else set()
                    )
                    assert triggers(doc) <= allowed, (path.name, triggers(doc))
        if path.name in {"train.yml", "reap.yml", "sweep.yml", "predict.yml"}:
            assert not triggers(doc) & {*PR_EVENTS, "workflow_run", "workflow_call", "issue_comment"}
    assert gpu_workflow_names == {"train.yml", "sweep-trial.yml", "predict.yml"}


def test_no_expression_inside_any_run(project_files: dict[str, list[Path]]) -> None:
    offenders = [
        f"{path.name}: {where}"
        for path in project_files["workflows"] + project_files["actions"]
        for where in expressions_in_run(load_yaml(path))
    ]
    assert not offenders, offenders
