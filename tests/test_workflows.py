"""GitHub Actions files of the baked project (and of this template repository) pass real, offline linters.

Four independent checks, each with a negative control so that none can pass silently:
- actionlint (with shellcheck on the `run:` scripts and the local setup action resolved),
- zizmor --offline (workflow security: pinning, injection, credentials, permissions, Dependabot),
- check-jsonschema with the vendored GitHub workflow / action / Dependabot schemas,
- structural rules on the parsed YAML that no linter enforces (pins from tests/action_pins.json with matching
  `# vX.Y.Z` comments, `permissions: {}` at the top, timeouts, no self-hosted runner reachable from a PR, no
  `${{` inside `run:`, no dependency cache in a job that holds AWS credentials).

Then the meaning of the GPU workflows (train.yml: start -> train -> stop; reap.yml), an injection test that
runs every generated `run:` script under bash with attacker-chosen branch names, inputs and outputs (`uv`
replaced by a recorder), and a check that every `gpu-runner <subcommand> --flag` the workflows use exists.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from conftest import iter_strings, write_config
from cookiecutter.main import cookiecutter

REPO_ROOT = Path(__file__).resolve().parents[1]
PINS_FILE = Path(__file__).with_name("action_pins.json")
# The team's source of truth; absent in a plain clone of the template, so that check is skipped there.
ACTIONS_MD = REPO_ROOT.parent / "shared" / "ACTIONS.md"
TOOL_DIR = Path(sys.executable).parent

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
# A `uses:` line as written, with its optional trailing comment (the pinned version).
USES_LINE_RE = re.compile(r"""^\s*(?:-\s+)?uses:\s*(['"]?)(?P<ref>[^\s'"#]+)\1\s*(?:#\s*(?P<comment>.*))?$""")
GITHUB_HOSTED_RE = re.compile(r"^(?:ubuntu|windows|macos)-[\w.-]+$")
PR_EVENTS = ("pull_request", "pull_request_target")
SETUP_ACTION = "./.github/actions/setup"
AWS_CREDENTIALS = "aws-actions/configure-aws-credentials"
# Actions that restore or save a dependency cache: the `with:` key that switches it, and whether it is on when
# unset (setup-uv's default "auto" caches on GitHub-hosted runners).
CACHE_ACTIONS = {"astral-sh/setup-uv": ("enable-cache", True), "actions/setup-python": ("cache", False)}
RUNNER_CLI = REPO_ROOT / "{{cookiecutter.project_slug}}" / "runner" / "src" / "gpu_runner" / "cli.py"

# The gpu-runner CLI contract the workflows are written against:
#   gpu-runner [--settings FILE] <subcommand> [options]   (the global option precedes the subcommand)
# subcommand -> the options the workflows may pass.
# The real CLI of the baked project is checked too (test_gpu_runner_cli_*): its --help, and a parse of every
# command line the workflows produce.
CLI_GLOBAL_OPTIONS = {"--settings"}
CLI_CONTRACT = {
    "launch": {"--instance-type", "--spot", "--commit", "--attempt"},
    "wait": {"--region", "--instance-id", "--runner-id"},
    "teardown": {
        "--region", "--instance-id", "--runner-id", "--parameter", "--mlflow-run-id", "--attempt", "--phase",
    },
    "resume": {
        "--ref", "--attempt", "--train-interrupted", "--region", "--instance-id", "--commit", "--config",
        "--instance-type",
    },
    "reap": set(),
    "workflow-settings": set(),
}  # fmt: skip
# The output keys are written once, in the runner's workflow_contract.py (copied verbatim into every bake).
RUNNER_CONTRACT = RUNNER_CLI.with_name("workflow_contract.py")


def runner_output_keys(enum: str) -> dict[str, str]:
    """Member name -> value of one StrEnum of gpu_runner/workflow_contract.py, read from its source."""
    tree = ast.parse(RUNNER_CONTRACT.read_text(encoding="utf-8"))
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == enum]
    assigns = [node for node in cls.body if isinstance(node, ast.Assign)]
    return {node.targets[0].id: node.value.value for node in assigns}  # type: ignore[attr-defined]


# Step outputs `gpu-runner launch` writes to $GITHUB_OUTPUT (all are mapped to outputs of the start job).
LAUNCH_OUTPUTS = tuple(runner_output_keys("LaunchOutput").values())
# `gpu-runner wait`'s outputs: the timeline's "runner online" moment.
WAIT_OUTPUTS = tuple(runner_output_keys("WaitOutput").values())
# `gpu-runner workflow-settings`'s outputs: region and train branch prefix of the default branch's settings.
SETTINGS_OUTPUTS = tuple(runner_output_keys("SettingsOutput").values())
# The train job's timeline outputs (<phase>-at, epoch seconds): the boot script's moments and the job's start.
TIMELINE_PHASES = ("boot", "image-ready", "runner-started", "job-started")

# Every inline `# zizmor: ignore[...]` in the generated project, per file, in order. Each must carry a reason,
# and test_zizmor_ignores_are_needed proves each suppresses a real finding on its own line and nothing else.
# self-repository: zizmor prefers `uses: $/.github/actions/setup`, which act (the workflow tests) and GitHub
# Enterprise Server do not understand; `./` is equivalent after actions/checkout.
# unpinned-uses: train.yml's start and stop call the default branch's reusable workflows at
# `@<default_branch>` on purpose (the launch role trusts only that ref; issue 13 item 2).
EXPECTED_ZIZMOR_IGNORES = {
    ".github/workflows/ci.yml": ["self-repository"] * 2,
    ".github/workflows/promote.yml": ["self-repository"],
    ".github/workflows/gpu-runner-start.yml": ["self-repository"],
    ".github/workflows/gpu-runner-stop.yml": ["self-repository"],
    ".github/workflows/reap.yml": ["self-repository"],
    ".github/workflows/train.yml": ["unpinned-uses", "self-repository", "unpinned-uses"],
}
# This repository's reusable workflow at the default branch (train.yml's start and stop jobs); the branch is
# the `default_branch` answer, any valid branch name (no space, no '#': hooks/pre_gen_project.py).
DEFAULT_BRANCH_WORKFLOW_RE = re.compile(
    r"[\w.-]+/[\w.-]+/\.github/workflows/(?P<file>gpu-runner-(?:start|stop)\.yml)@(?P<branch>[^\s#]+)"
)
ZIZMOR_IGNORE_RE = re.compile(r"#\s*zizmor:\s*ignore\[(?P<rules>[^\]]*)\](?P<reason>.*)$")
# Known findings of the pedantic persona in the GPU workflow files (the regular persona reports none):
# (file, audit, offending line stripped). None: the train job runs in host mode (no container image to pin;
# its wheels are sha256-pinned in uv.lock). A user's `container:` must be pinned by digest (zizmor flags it).
EXPECTED_PEDANTIC_GPU_FINDINGS: set[tuple[str, str, str]] = set()

BAD_WORKFLOW = """\
name: bad
on:
  pull_request_target:
  pull_request:
jobs:
  build:
    runs-on: self-hosted
    steps:
      - uses: actions/checkout@v4
      - uses: astral-sh/setup-uv@c18668ad3cf93ea998bef934396af7bb5c839dc7 # v9.9.9
      - uses: actions/cache@0123456789abcdef0123456789abcdef01234567 # v6.1.0
      - uses: ./.github/actions/setup
        with:
          bogus: "1"
      - run: echo "${{ github.head_ref }}"
      - run: echo $GREETING
  aws:
    runs-on: ubuntu-latest
    timeout-minutes: 5
    permissions:
      id-token: write
    steps:
      - uses: aws-actions/configure-aws-credentials@e1253824e5c10ff9df46874f81ed3ec929e19cfd # v6.3.0
        with:
          aws-region: eu-west-1
      - uses: ./.github/actions/setup
      - uses: actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97 # v7.0.0
        with:
          cache: pip
      - uses: actions/cache@55cc8345863c7cc4c66a329aec7e433d2d1c52a9 # v6.1.0
        with:
          path: x
          key: x
"""

BAD_ACTION = """\
name: bad
description: expands an input inside a shell script
inputs:
  who:
    description: anyone
    default: world
runs:
  using: composite
  steps:
    - shell: bash
      run: |
        echo "hello ${{ inputs.who }}"
        echo $GREETING
"""

BAD_DEPENDABOT = """\
version: 2
updates:
  - package-ecosystem: uv
    directory: "/"
    insecure-external-code-execution: allow
    schedule:
      interval: weekly
"""


# ---------------------------------------------------------------- helpers
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
    """Absolute path of a linter from the template's environment; fail (never skip) when it is missing."""
    found = shutil.which(name, path=f"{TOOL_DIR}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail(f"{name} not found: run `uv sync` in the template repository")
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


def actionlint(files: list[Path], cwd: Path) -> tuple[int, list[dict[str, Any]]]:
    """Run actionlint with shellcheck on every `run:` block; pyflakes is disabled so results never depend on
    what happens to be installed globally."""
    proc = run(
        [
            tool("actionlint"),
            "-shellcheck",
            tool("shellcheck"),
            "-pyflakes=",
            "-format",
            "{{json .}}",
            *map(str, files),
        ],
        cwd,
    )
    assert proc.returncode in (0, 1), f"actionlint crashed ({proc.returncode}): {proc.stderr}"
    errors = json.loads(proc.stdout or "[]") or []
    return proc.returncode, errors


def shellcheck_action(action: Path) -> list[str]:
    """actionlint lints workflows only; shellcheck the `run:` scripts of a composite action the same way
    (expressions blanked out, as actionlint does, since GitHub substitutes them before the shell runs)."""
    problems: list[str] = []
    for where, step in iter_steps(load_yaml(action)):
        shell = (str(step.get("shell", "")).split() or [""])[0]
        if "run" not in step or shell not in {"bash", "sh"}:
            continue
        script = re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m[0]), step["run"])
        proc = subprocess.run(
            [
                tool("shellcheck"),
                "--norc",
                f"--shell={shell}",
                "--format=gcc",
                "-e",
                "SC1091",
                "-",
            ],
            input=script,
            env=offline_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode in (0, 1), f"shellcheck failed: {proc.stderr}"
        problems += [f"{action}: {where}: {line}" for line in proc.stdout.splitlines()]
    return problems


def zizmor(
    files: list[Path], cwd: Path, persona: str = "regular", *, ignores: bool = True
) -> tuple[int, list[dict[str, Any]]]:
    """Run zizmor offline on explicit files. `--no-config`: a project config cannot switch audits off; only
    inline `# zizmor: ignore[...]` comments (visible in review) are honoured, unless `ignores=False`."""
    proc = run(
        [
            tool("zizmor"),
            "--offline",
            "--no-config",
            "--no-progress",
            "--format",
            "json",
            f"--persona={persona}",
            *([] if ignores else ["--no-ignores"]),
            *map(str, files),
        ],
        cwd,
    )
    assert proc.returncode != 1, f"zizmor failed: {proc.stderr}"
    return proc.returncode, json.loads(proc.stdout or "[]")


def check_jsonschema(schema: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    return run([tool("check-jsonschema"), "--builtin-schema", schema, *map(str, files)], REPO_ROOT)


def describe_actionlint(errors: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{e['filepath']}:{e['line']}:{e['column']} [{e['kind']}] {e['message']}" for e in errors
    )


def zizmor_location(finding: dict[str, Any], root: Path | None = None) -> tuple[str, int]:
    """(path, 1-based line) of a finding's primary location; the path relative to `root` when given."""
    locations = finding["locations"]
    loc = next((x for x in locations if x["symbolic"].get("kind") == "Primary"), locations[0])
    path = loc["symbolic"]["key"].get("Local", {}).get("verbatim_path", "?")
    if root is not None:
        path = Path(path).relative_to(root).as_posix()
    return path, loc["concrete"]["location"]["start_point"]["row"] + 1


def describe_zizmor(findings: list[dict[str, Any]]) -> str:
    lines = []
    for f in findings:
        path, row = zizmor_location(f)
        lines.append(f"{path}:{row} [{f['ident']}] {f['desc']}")
    return "\n".join(lines)


def load_pins() -> dict[tuple[str, str], str]:
    """(owner/repo, sha) -> version."""
    data = json.loads(PINS_FILE.read_text(encoding="utf-8"))
    return {(p["action"], p["sha"]): p["version"] for p in data["pins"]}


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


def uses_problems(path: Path, doc: dict[str, Any], pins: dict[tuple[str, str], str]) -> list[str]:
    """Every remote `uses:` is owner/repo@<sha> from the pins file, with `# <version>` matching that pin."""
    problems: list[str] = []
    written: dict[str, list[str | None]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := USES_LINE_RE.match(line):
            comment = m["comment"].split()[0] if m["comment"] else None
            written.setdefault(m["ref"], []).append(comment)
    for where, ref in iter_uses(doc):
        if ref not in written:
            problems.append(f"{where}: `uses: {ref}` is not written on one line as `uses: <ref> # <version>`")
            continue
        if ref.startswith("./"):
            root = next(d.parent for d in path.parents if d.name == ".github")
            if (
                not any((root / ref / name).is_file() for name in ("action.yml", "action.yaml"))
                and not (root / ref).is_file()
            ):
                problems.append(f"{where}: local action {ref} does not exist")
            continue
        if called := DEFAULT_BRANCH_WORKFLOW_RE.fullmatch(ref):
            # Issue 13 item 2: start/stop call this repository's reusable workflows AT THE DEFAULT BRANCH, the
            # ref the launch role's OIDC `sub` names (a SHA would pin old code, `./` the branch's own copy).
            root = next(d.parent for d in path.parents if d.name == ".github")
            if not (root / ".github" / "workflows" / called["file"]).is_file():
                problems.append(f"{where}: reusable workflow {ref} does not exist in this repository")
            continue
        if ref.startswith("docker://"):
            if "@sha256:" not in ref:
                problems.append(f"{where}: docker image {ref} is not pinned by digest")
            continue
        name, _, sha = ref.partition("@")
        owner_repo = "/".join(name.split("/")[:2])
        if not SHA_RE.match(sha):
            problems.append(f"{where}: {ref} is not pinned to a full commit SHA")
            continue
        version = pins.get((owner_repo, sha))
        if version is None:
            problems.append(f"{where}: {owner_repo}@{sha} is not in tests/action_pins.json")
            continue
        comments = written[ref]
        if any(c != version for c in comments):
            problems.append(f"{where}: {ref} must carry the version comment `# {version}`, found {comments}")
    return problems


def workflow_problems(path: Path, pins: dict[tuple[str, str], str]) -> list[str]:
    """Rules on one parsed workflow that the linters do not enforce (or only in some personas)."""
    doc = load_yaml(path)
    problems = uses_problems(path, doc, pins)
    events = triggers(doc)
    if "pull_request_target" in events:
        problems.append("triggered by pull_request_target (runs fork code with a privileged token)")
    if doc.get("permissions", None) != {}:
        problems.append(f"top-level permissions must be {{}}, found {doc.get('permissions', '<missing>')!r}")
    for job_id, job in (doc.get("jobs") or {}).items():
        perms = job.get("permissions")
        if not isinstance(perms, dict):
            problems.append(f"jobs.{job_id}: permissions must be an explicit mapping, found {perms!r}")
        if "uses" not in job and "timeout-minutes" not in job:
            problems.append(f"jobs.{job_id}: no timeout-minutes")
        if events & set(PR_EVENTS):
            runs_on = job.get("runs-on")
            labels = runs_on if isinstance(runs_on, list) else [runs_on]
            if "uses" not in job and not all(
                isinstance(x, str) and GITHUB_HOSTED_RE.match(x) for x in labels
            ):
                problems.append(
                    f"jobs.{job_id}: runs-on {runs_on!r} is reachable from a pull request but is not "
                    "a literal GitHub-hosted label (self-hosted runners must never run pull request code)"
                )
    for where, step in iter_steps(doc):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            persist = (step.get("with") or {}).get("persist-credentials")
            if persist not in (False, "false"):
                problems.append(f"{where}: actions/checkout without persist-credentials: false")
    problems += [
        f"{where}: `${{{{` inside run: (pass the value through env:)" for where in expressions_in_run(doc)
    ]
    problems += cache_problems(doc)
    return problems


def step_uses(step: dict[str, Any]) -> str:
    """`owner/repo` (or the local path) a step uses, without the ref; "" for a `run:` step."""
    return str(step.get("uses", "")).partition("@")[0]


def holds_aws_credentials(job: dict[str, Any]) -> bool:
    """The job configures AWS credentials, or runs on a non-GitHub-hosted runner (our GPU instances carry an
    instance profile)."""
    runs_on = job.get("runs-on")
    labels = runs_on if isinstance(runs_on, list) else [runs_on]
    hosted = all(isinstance(x, str) and GITHUB_HOSTED_RE.match(x) for x in labels)
    return not hosted or any(step_uses(s) == AWS_CREDENTIALS for s in job.get("steps") or [])


def cache_problems(doc: dict[str, Any]) -> list[str]:
    """A job holding AWS credentials must not restore a cache: caches are shared across branches, so a
    poisoned entry would run with the credentials. The local setup action caches unless told
    `enable-cache: "false"`."""
    problems = []
    for job_id, job in (doc.get("jobs") or {}).items():
        if "uses" in job or not holds_aws_credentials(job):
            continue
        for i, step in enumerate(job.get("steps") or []):
            where, uses, with_ = f"jobs.{job_id}.steps[{i}]", step_uses(step), step.get("with") or {}
            if uses == "actions/cache" or uses.startswith("actions/cache/"):
                problems.append(f"{where}: actions/cache in a job that holds AWS credentials")
            elif uses == SETUP_ACTION and str(with_.get("enable-cache")).lower() != "false":
                problems.append(
                    f'{where}: {SETUP_ACTION} without enable-cache: "false" holds AWS credentials'
                )
            elif uses in CACHE_ACTIONS:
                key, on_by_default = CACHE_ACTIONS[uses]
                value = str(with_.get(key, "")).lower()
                if value not in {"", "false"} or (value == "" and on_by_default):
                    problems.append(f"{where}: {uses} with a cache in a job that holds AWS credentials")
    return problems


def expressions_in_run(doc: dict[str, Any]) -> list[str]:
    """Steps whose `run:` contains `${{`: GitHub pastes the value into the script before the shell sees it."""
    return [where for where, step in iter_steps(doc) if "${{" in str(step.get("run", ""))]


# ---------------------------------------------------------------- running `run:` scripts
# A stand-in for uv: records its argv (one JSON list per line) and prints $FAKE_UV_STDOUT. Every generated
# script reaches the outside world through uv, so the recording is exactly what the real commands receive.
FAKE_UV = """\
import json, os, sys
with open(os.environ["FAKE_UV_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
sys.stdout.write(os.environ.get("FAKE_UV_STDOUT", ""))
"""
EXPRESSION_RE = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.DOTALL)
# Contexts an outsider (or anyone able to push a branch) can shape: branch names, event payloads, dispatch
# inputs, and outputs computed from them.
UNTRUSTED_RE = re.compile(
    r"\b(?:github\.(?:ref|ref_name|head_ref|base_ref|event)\b|inputs\.|needs\.|steps\.)"
)
# A branch name git accepts, and a payload that breaks out of quotes, substitutions and command lists.
ATTACK_REF = "train/$(touch${IFS}pwned)"
PAYLOAD = "$(touch pwned)`touch pwned`\"; touch pwned; echo \"';touch pwned;'"
BENIGN_OUTPUTS = {
    "availability-zone": "eu-west-1b",
    "bucket": "your-org-ml-project-ml",
    "train-branch-prefix": "train/",
    "runner-id": "4242",
    "runner-name": "ml-project-777-1",
    "label": "ml-project-777-1",
    "parameter": "/gpu-runner/ml-project/777-1",
    "instance-id": "i-0123456789abcdef0",
    "region": "eu-west-1",
    "instance-type": "g5.xlarge",
    "market": "spot",
    "interrupted": "true",
    "mlflow-run-id": "0123456789abcdef0123456789abcdef",
    # The timeline's moments (epoch seconds).
    "runner-online-at": "1796119985",
    "runner-online-seconds": "131",
    "boot-at": "1796119890",
    "image-ready-at": "1796119960",
    "runner-started-at": "1796119975",
    "job-started-at": "1796119990",
    "gpu-preflight": "ok",
}
BENIGN_INPUTS = {
    "config": "configs/train.yaml", "instance-type": "g5.xlarge", "spot": "true", "attempt": "2",
    "commit": "0123456789abcdef0123456789abcdef01234567", "allow-cpu": "false",
}  # fmt: skip


def context_value(name: str, scenario: str) -> str:
    """What an expression operand evaluates to in a scenario: `benign` (a dispatch with every input set and
    every launch output known), `empty` (a push: no inputs; or a launch that failed before any output) or
    `attack` (every outsider-controlled value is PAYLOAD, the branch is ATTACK_REF)."""
    if name.startswith(("secrets.", "vars.")):
        return "configured-value"
    if name == "github.run_id":
        return "777"
    if scenario == "attack" and name in {"github.ref_name", "github.head_ref"}:
        return ATTACK_REF
    if scenario == "attack" and name == "github.ref":
        return f"refs/heads/{ATTACK_REF}"
    if name == "github.ref_name":  # a push and a dispatch always have one
        return "train/demo"
    if not UNTRUSTED_RE.match(name):
        return f"<{name}>"
    if name.startswith("steps.settings.outputs."):
        # The default branch's configs/gpu-runner.yaml, validated by gpu-runner (a failed read ends the job):
        # neither empty nor outsider-controlled.
        return BENIGN_OUTPUTS[name.rsplit(".", 1)[-1]]
    if scenario == "attack":
        return PAYLOAD
    if scenario == "empty":
        return ""
    key = name.rsplit(".", 1)[-1]
    if name.startswith("inputs.") and key in BENIGN_INPUTS:
        return BENIGN_INPUTS[key]
    # The reusable stop workflow gets the start and train jobs' outputs as inputs.
    return BENIGN_OUTPUTS["interrupted" if key == "train-interrupted" else key]


def evaluate(expression: str, scenario: str) -> str:
    """The subset of GitHub's expression language the env blocks use: operands joined by `||`."""
    for operand in (x.strip() for x in expression.split("||")):
        value = operand[1:-1] if operand[:1] == operand[-1:] == "'" else context_value(operand, scenario)
        if value:
            return value
    return ""


def substitute(text: str, scenario: str) -> str:
    """What GitHub does to a string before a step sees it: every `${{ }}` replaced by its value."""
    return EXPRESSION_RE.sub(lambda m: evaluate(m[1], scenario), text)


def run_bash(
    script: str, env: dict[str, str], workdir: Path, *, uv_prints: str = ""
) -> tuple[int, list[list[str]]]:
    """Run a `run:` script as GitHub does (`bash --noprofile --norc -eo pipefail <file>`) with a recording uv
    first on PATH; returns the exit code and uv's recorded calls. Only system tools besides the recorder."""
    bin_dir, repo = workdir / "bin", workdir / "repo"
    bin_dir.mkdir(parents=True)
    repo.mkdir()
    fake = bin_dir / "uv"
    fake.write_text(f"#!{sys.executable}\n{FAKE_UV}", encoding="utf-8")
    fake.chmod(0o755)
    (workdir / "step.sh").write_text(script, encoding="utf-8")
    log = workdir / "uv.log"
    full_env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        "FAKE_UV_LOG": str(log),
        "FAKE_UV_STDOUT": uv_prints,
        "GITHUB_OUTPUT": str(workdir / "github_output"),
        "GITHUB_STEP_SUMMARY": str(workdir / "step_summary"),
        **env,
    }
    proc = subprocess.run(
        [tool("bash"), "--noprofile", "--norc", "-eo", "pipefail", str(workdir / "step.sh")],
        cwd=repo,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    calls = (
        [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    )
    return proc.returncode, calls


def run_steps(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, job, step) for every `run:` step of a workflow."""
    for job_id, job in (doc.get("jobs") or {}).items():
        for i, step in enumerate(job.get("steps") or []):
            if "run" in step:
                yield f"jobs.{job_id}.steps[{i}]", job, step


def step_env(doc: dict[str, Any], job: dict[str, Any], step: dict[str, Any], scenario: str) -> dict[str, str]:
    """The environment a step's shell gets: workflow, job and step `env:` after substitution, plus the default
    variables GitHub sets from the same (possibly hostile) event."""
    merged = {**(doc.get("env") or {}), **(job.get("env") or {}), **(step.get("env") or {})}
    env = {key: substitute(str(value), scenario) for key, value in merged.items()}
    ref_name = ATTACK_REF if scenario == "attack" else "train/demo"
    return {
        "GITHUB_REF_NAME": ref_name, "GITHUB_REF": f"refs/heads/{ref_name}",
        # The caller (train.yml on the branch), as GitHub describes it to a called workflow too.
        "GITHUB_EVENT_NAME": "workflow_dispatch" if scenario == "benign" else "push",
        "GITHUB_REPOSITORY": "octo-org/octo-repo",
        "GITHUB_WORKFLOW_REF": f"octo-org/octo-repo/.github/workflows/train.yml@refs/heads/{ref_name}",
        **env,
    }  # fmt: skip


class GpuRunnerCall(NamedTuple):
    argv: list[str]  # after `gpu-runner`
    global_options: list[str]
    subcommand: str
    options: list[str]


def gpu_runner_calls(calls: list[list[str]]) -> list[GpuRunnerCall]:
    """Every `uv run --no-sync gpu-runner [--opt value]... <subcommand> [--opt value | --opt=value]...` call.
    (Every option of the contract takes a value.)"""
    found = []
    for argv in calls:
        if argv[:3] != ["run", "--no-sync", "gpu-runner"]:
            continue
        rest, global_options, i = argv[3:], [], 0
        while i < len(rest) and rest[i].startswith("--"):
            global_options.append(rest[i].split("=", 1)[0])
            i += 1 if "=" in rest[i] else 2
        subcommand, options = rest[i], []
        tail = rest[i + 1 :]
        j = 0
        while j < len(tail):
            assert tail[j].startswith("--"), f"unexpected argument {tail[j]!r} in {argv}"
            options.append(tail[j].split("=", 1)[0])
            j += 1 if "=" in tail[j] else 2
        found.append(GpuRunnerCall(rest, global_options, subcommand, options))
    return found


def make_targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile.read_text(encoding="utf-8"), re.MULTILINE))


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project rendered with default answers, made a git repository: actionlint resolves local actions
    (`./.github/actions/setup`) only inside a repository."""
    return bake_project(tmp_path_factory.mktemp("baked"))


# Non-default answers that change the GPU workflows.
CUSTOM_ANSWERS = {
    "train_branch_prefix": "gpu/",
    "max_runtime_minutes": 95,
    "aws_region": "us-east-2",
    "default_branch": "develop",
}


@pytest.fixture(scope="module")
def baked_custom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake_project(tmp_path_factory.mktemp("baked-custom"), **CUSTOM_ANSWERS)


def bake_project(out: Path, **answers: Any) -> Path:
    project = Path(
        cookiecutter(
            str(REPO_ROOT),
            no_input=True,
            output_dir=str(out / "out"),
            extra_context=answers or None,
            config_file=str(write_config(out / "cookiecutter")),
        )
    )
    if not (project / ".git").exists():
        subprocess.run([tool("git"), "init", "--quiet", str(project)], check=True, env=offline_env())
    return project


@pytest.fixture(scope="module")
def baked_files(baked: Path) -> dict[str, list[Path]]:
    files = github_files(baked)
    names = {p.relative_to(baked).as_posix() for group in files.values() for p in group}
    assert {
        ".github/workflows/ci.yml",
        ".github/workflows/train.yml",
        ".github/workflows/reap.yml",
        ".github/actions/setup/action.yml",
        ".github/dependabot.yml",
    } <= names
    return files


@pytest.fixture(scope="module")
def template_workflows() -> list[Path]:
    files = github_files(REPO_ROOT)["workflows"]
    assert REPO_ROOT / ".github" / "workflows" / "ci.yml" in files
    return files


@pytest.fixture(scope="module")
def bad_project(baked: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the baked project with a deliberately bad workflow, composite action and Dependabot file."""
    project = tmp_path_factory.mktemp("bad") / baked.name
    shutil.copytree(baked, project, symlinks=True)
    (project / ".github" / "workflows" / "bad.yml").write_text(BAD_WORKFLOW, encoding="utf-8")
    (project / ".github" / "actions" / "bad").mkdir()
    (project / ".github" / "actions" / "bad" / "action.yml").write_text(BAD_ACTION, encoding="utf-8")
    (project / ".github" / "dependabot.yml").write_text(BAD_DEPENDABOT, encoding="utf-8")
    return project


@pytest.fixture(scope="module")
def pins() -> dict[tuple[str, str], str]:
    return load_pins()


# ---------------------------------------------------------------- rendering
def test_github_files_rendered_and_parse(baked_files: dict[str, list[Path]]) -> None:
    for path in (p for group in baked_files.values() for p in group):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?<!\$)\{\{|\{%|\{#", text), f"unrendered Jinja in {path}"
        assert isinstance(load_yaml(path), dict), path


# ---------------------------------------------------------------- (a) actionlint
def test_actionlint_clean_on_generated_workflows(baked: Path, baked_files: dict[str, list[Path]]) -> None:
    code, errors = actionlint(baked_files["workflows"], baked)
    assert (code, errors) == (0, []), describe_actionlint(errors)


def test_actionlint_clean_on_template_workflows(template_workflows: list[Path]) -> None:
    code, errors = actionlint(template_workflows, REPO_ROOT)
    assert (code, errors) == (0, []), describe_actionlint(errors)


def test_actionlint_negative_control(bad_project: Path) -> None:
    code, errors = actionlint([bad_project / ".github" / "workflows" / "bad.yml"], bad_project)
    assert code == 1
    kinds = {e["kind"] for e in errors}
    messages = "\n".join(e["message"] for e in errors)
    # Untrusted context in a script, a shellcheck finding (proves shellcheck ran), and an unknown input to the
    # local setup action (proves local actions are resolved).
    assert {"expression", "shellcheck", "action"} <= kinds, describe_actionlint(errors)
    assert "github.head_ref" in messages
    assert "SC2086" in messages
    assert 'input "bogus" is not defined' in messages


def test_shellcheck_clean_on_composite_actions(baked_files: dict[str, list[Path]]) -> None:
    problems = [p for action in baked_files["actions"] for p in shellcheck_action(action)]
    assert not problems, "\n".join(problems)


def test_shellcheck_composite_negative_control(bad_project: Path) -> None:
    problems = shellcheck_action(bad_project / ".github" / "actions" / "bad" / "action.yml")
    assert any("SC2086" in p for p in problems), problems


# ---------------------------------------------------------------- (b) zizmor
def test_zizmor_clean_on_generated_project(baked: Path, baked_files: dict[str, list[Path]]) -> None:
    files = [p for group in baked_files.values() for p in group]
    code, findings = zizmor(files, baked)
    assert (code, findings) == (0, []), describe_zizmor(findings)


def test_zizmor_clean_on_template_workflows(template_workflows: list[Path]) -> None:
    code, findings = zizmor(template_workflows, REPO_ROOT)
    assert (code, findings) == (0, []), describe_zizmor(findings)


def test_zizmor_pedantic_clean_on_ci_files(baked: Path, template_workflows: list[Path]) -> None:
    """The thin CI files this template owns pass even the pedantic persona."""
    files = [
        baked / ".github" / "workflows" / "ci.yml",
        baked / ".github" / "actions" / "setup" / "action.yml",
        baked / ".github" / "dependabot.yml",
        *template_workflows,
    ]
    code, findings = zizmor(files, baked, persona="pedantic")
    assert (code, findings) == (0, []), describe_zizmor(findings)


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        (
            ".github/workflows/bad.yml",
            {
                "unpinned-uses",
                "template-injection",
                "artipacked",
                "excessive-permissions",
                "dangerous-triggers",
            },
        ),
        (".github/actions/bad/action.yml", {"template-injection"}),
        (".github/dependabot.yml", {"dependabot-execution", "dependabot-cooldown"}),
    ],
)
def test_zizmor_negative_control(bad_project: Path, relpath: str, expected: set[str]) -> None:
    code, findings = zizmor([bad_project / relpath], bad_project)
    assert code != 0
    assert expected <= {f["ident"] for f in findings}, describe_zizmor(findings)


# ---------------------------------------------------------------- (c) schemas
def test_schemas_generated(baked_files: dict[str, list[Path]]) -> None:
    checks = [
        ("vendor.github-workflows", baked_files["workflows"]),
        ("custom.github-workflows-require-timeout", baked_files["workflows"]),
        ("vendor.github-actions", baked_files["actions"]),
        ("vendor.dependabot", baked_files["dependabot"]),
    ]
    for schema, files in checks:
        proc = check_jsonschema(schema, files)
        assert proc.returncode == 0, f"{schema}:\n{proc.stdout}{proc.stderr}"


def test_schemas_template(template_workflows: list[Path]) -> None:
    for schema in ("vendor.github-workflows", "custom.github-workflows-require-timeout"):
        proc = check_jsonschema(schema, template_workflows)
        assert proc.returncode == 0, f"{schema}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize(
    ("schema", "filename", "text"),
    [
        (
            "vendor.github-workflows",
            "wf.yml",
            "on: push\njobs:\n  a:\n    timeout-minutes: soon\n    steps: []\n",
        ),
        ("custom.github-workflows-require-timeout", "bad.yml", BAD_WORKFLOW),
        ("vendor.github-actions", "action.yml", "name: x\ndescription: no runs section\n"),
        ("vendor.dependabot", "dependabot.yml", BAD_DEPENDABOT.replace("weekly", "sometimes")),
    ],
)
def test_schemas_negative_control(tmp_path: Path, schema: str, filename: str, text: str) -> None:
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    proc = check_jsonschema(schema, [path])
    assert proc.returncode == 1, f"{schema} accepted an invalid file:\n{proc.stdout}{proc.stderr}"
    assert "Schema validation errors" in proc.stdout + proc.stderr


# ---------------------------------------------------------------- (d) structure
def test_structure_generated(baked_files: dict[str, list[Path]], pins: dict[tuple[str, str], str]) -> None:
    problems = [f"{p.name}: {msg}" for p in baked_files["workflows"] for msg in workflow_problems(p, pins)]
    for action in baked_files["actions"]:
        problems += [f"{action}: {msg}" for msg in uses_problems(action, load_yaml(action), pins)]
    assert not problems, "\n".join(problems)


def test_structure_template(template_workflows: list[Path], pins: dict[tuple[str, str], str]) -> None:
    problems = [f"{p.name}: {msg}" for p in template_workflows for msg in workflow_problems(p, pins)]
    assert not problems, "\n".join(problems)


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
        "actions/cache@0123456789abcdef0123456789abcdef01234567 is not in tests/action_pins.json",
        "jobs.build.steps[4]: `${{` inside run:",
        'jobs.aws.steps[1]: ./.github/actions/setup without enable-cache: "false"',
        "jobs.aws.steps[2]: actions/setup-python with a cache",
        "jobs.aws.steps[3]: actions/cache in a job",
    ):
        assert expected in problems, f"structure check missed {expected!r}:\n{problems}"


def test_pins_file_matches_actions_md() -> None:
    """tests/action_pins.json is a copy of the team's ACTIONS.md; when that file is at hand, they agree."""
    if not ACTIONS_MD.is_file():
        pytest.skip(f"{ACTIONS_MD} not present (plain clone of the template)")
    text = ACTIONS_MD.read_text(encoding="utf-8")
    pins = load_pins()
    assert set(re.findall(r"\b[0-9a-f]{40}\b", text)) == {sha for _, sha in pins}
    for action, sha, version in re.findall(r"uses: ([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # (v[\w.]+)", text):
        assert pins.get((action, sha)) == version, (action, sha)
    assert all(SHA_RE.match(sha) and re.match(r"^v\d+\.\d+\.\d+$", v) for (_, sha), v in pins.items())


# ---------------------------------------------------------------- meaning
def test_generated_ci_meaning(baked: Path) -> None:
    ci = load_yaml(baked / ".github" / "workflows" / "ci.yml")
    assert triggers(ci) == {"push", "pull_request"}
    assert ci["concurrency"] == {
        "group": "${{ github.workflow }}-${{ github.ref }}",
        "cancel-in-progress": "${{ github.event_name == 'pull_request' }}",
    }
    targets = make_targets(baked / "Makefile")
    expected_runs = {"lint": ["make lock-check", "make lint"], "test": ["make test"]}
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


def test_setup_action_meaning(baked: Path, tmp_path: Path) -> None:
    action = load_yaml(baked / ".github" / "actions" / "setup" / "action.yml")
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
    assert install("runner") == (0, [["sync", "--locked", "--package", "gpu-runner", "--no-dev"]])
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
    # ...and python3's own TensorFlow 2.15 when it has one (a TF image as the job's container, a baked AMI).
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


def test_dependabot_meaning(baked: Path, baked_files: dict[str, list[Path]]) -> None:
    config = load_yaml(baked / ".github" / "dependabot.yml")
    by_ecosystem = {u["package-ecosystem"]: u for u in config["updates"]}
    assert set(by_ecosystem) == {"github-actions", "uv"}
    action_dirs = {"/" + a.parent.relative_to(baked).as_posix() for a in baked_files["actions"]}
    assert {"/", *action_dirs} <= set(by_ecosystem["github-actions"]["directories"])
    assert by_ecosystem["uv"]["directory"] == "/"
    for update in by_ecosystem.values():
        assert update["schedule"]["interval"] == "weekly"
        assert update["groups"], "updates must be grouped"


def test_template_makefile_has_ci_targets() -> None:
    makefile = REPO_ROOT / "Makefile"
    if not makefile.is_file():
        pytest.skip("template Makefile not written yet")
    assert {"test", "test-e2e", "test-matrix"} <= make_targets(makefile)


def test_template_ci_meaning(template_workflows: list[Path]) -> None:
    ci = load_yaml(REPO_ROOT / ".github" / "workflows" / "ci.yml")
    assert triggers(ci) == {"push", "pull_request"}
    assert "${{ github.ref }}" in ci["concurrency"]["group"]
    jobs = ci["jobs"]
    assert jobs["test-matrix"]["needs"] == jobs["test-e2e"]["needs"] == "test"
    for job_id, command in (
        ("test", "make test"),
        ("test-e2e", "make test-e2e"),
        ("test-matrix", "make test-matrix"),
    ):
        job = jobs[job_id]
        assert job["runs-on"] == "ubuntu-latest"
        setup_python = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
        assert [s["with"]["python-version"] for s in setup_python] == ["3.11"]
        assert [s["run"] for s in job["steps"] if "run" in s] == [command]


# ---------------------------------------------------------------- GPU workflows: meaning
GPU_WORKFLOWS = ("train", "gpu-runner-start", "gpu-runner-stop", "reap")


def gpu_workflows(project: Path) -> dict[str, dict[str, Any]]:
    return {name: load_yaml(project / ".github" / "workflows" / f"{name}.yml") for name in GPU_WORKFLOWS}


def answers_of(project: Path) -> dict[str, Any]:
    return json.loads((project / ".cookiecutter.json").read_text(encoding="utf-8"))["cookiecutter"]


def steps_by_uses(job: dict[str, Any], uses: str) -> list[dict[str, Any]]:
    return [s for s in job.get("steps") or [] if step_uses(s) == uses]


def test_train_triggers_and_concurrency(baked: Path) -> None:
    train = gpu_workflows(baked)["train"]
    # Exactly: pushes to the training branches, and a manual dispatch. Never a pull request (fork code would
    # run on the self-hosted GPU runner with the AWS role).
    assert triggers(train) == {"push", "workflow_dispatch"}
    assert train["on"]["push"] == {"branches": ["train/**"]}
    inputs = train["on"]["workflow_dispatch"]["inputs"]
    assert {name: spec.get("default") for name, spec in inputs.items()} == {
        "config": "configs/train.yaml",
        "instance-type": "",
        "spot": "default",
        # Set by the stop job's re-dispatch after a spot interruption.
        "attempt": "1",
        "commit": "",
        # Debugging only: train on the CPU when the GPU preflight finds no GPU. A dispatch needs write access,
        # and train.yml has no pull_request trigger (above): a fork's pull request cannot set it.
        "allow-cpu": "false",
    }
    assert inputs["spot"]["type"] == "choice" and inputs["spot"]["options"] == ["default", "true", "false"]
    assert inputs["allow-cpu"]["type"] == "choice" and inputs["allow-cpu"]["options"] == ["false", "true"]
    # One training per branch; a running one is never cancelled.
    assert train["concurrency"] == {"group": "train-${{ github.ref }}", "cancel-in-progress": False}
    assert train["permissions"] == {}


def called_job(project: Path, caller: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the reusable workflow, its one job) a train.yml job calls at the default branch (issue 13 item 2)."""
    answers = answers_of(project)
    assert caller["uses"] == (
        f"{answers['github_owner']}/{answers['github_repo']}/.github/workflows/gpu-runner-{name}.yml"
        f"@{answers['default_branch']}"
    )
    doc = gpu_workflows(project)[f"gpu-runner-{name}"]
    assert triggers(doc) == {"workflow_call"} and doc["permissions"] == {}
    (job_id,) = doc["jobs"]
    assert job_id == name  # act logs jobs by this id: the e2e stories read `start` / `stop`
    return doc, doc["jobs"][job_id]


def test_start_and_stop_run_the_default_branch_code(baked: Path) -> None:
    """Issue 13 item 2: a branch that rewrites train.yml cannot change what launches, registers, tears down.
    start/stop call the default branch's reusable workflows (`@<default_branch>`, not `./`), those check out
    the default branch (never the caller's commit), no job gets a GitHub credential, and the start workflow
    refuses any caller but train.yml on a train branch, for push or workflow_dispatch only."""
    workflows = gpu_workflows(baked)
    jobs = workflows["train"]["jobs"]
    for name in ("start", "stop"):
        _, job = called_job(baked, jobs[name], name)
        (checkout,) = steps_by_uses(job, "actions/checkout")
        assert checkout["with"] == {"persist-credentials": False, "ref": answers_of(baked)["default_branch"]}
        assert job["steps"].index(checkout) < job["steps"].index(steps_by_uses(job, AWS_CREDENTIALS)[0])
    text = {n: (baked / ".github" / "workflows" / f"{n}.yml").read_text(encoding="utf-8") for n in workflows}
    for name, body in text.items():
        for secret in ("GPU_RUNNER_TOKEN", "GPU_RUNNER_APP_PRIVATE_KEY", "GPU_RUNNER_APP_ID"):
            assert secret not in body, f"{name}.yml still hands {secret} to a job"
        assert "secrets: inherit" not in body
    # The train job (branch code on the GPU) has no OIDC token: only the instance profile.
    assert "id-token" not in jobs["train"]["permissions"]
    _, start = called_job(baked, jobs["start"], "start")
    (guard,) = [
        s for s in start["steps"] if s.get("name") == "Refuse callers other than train.yml on a train branch"
    ]
    answers = answers_of(baked)
    # The prefix: the default branch's configs/gpu-runner.yaml, read by the step before (no credential yet).
    assert "run" in guard and guard["env"] == {
        "BRANCH_PREFIX": "${{ steps.settings.outputs.train-branch-prefix }}"
    }
    steps = start["steps"]
    assert steps.index(guard) < steps.index(steps_by_uses(start, AWS_CREDENTIALS)[0])
    assert all(
        "uses" not in s or s["uses"].startswith(("actions/checkout@", SETUP_ACTION))
        for s in steps[: steps.index(guard)]
    )
    base = "o/r/.github/workflows/"
    for event, ref, caller, ok in (
        ("push", "refs/heads/train/x", "train.yml@refs/heads/train/x", True),
        ("workflow_dispatch", "refs/heads/train/x", "train.yml@refs/heads/train/x", True),
        ("pull_request", "refs/pull/1/merge", "train.yml@refs/pull/1/merge", False),
        ("push", "refs/heads/feature", "train.yml@refs/heads/feature", False),
        ("push", "refs/heads/train/x", "steal.yml@refs/heads/train/x", False),
    ):
        env = {"BRANCH_PREFIX": answers["train_branch_prefix"], "GITHUB_EVENT_NAME": event, "GITHUB_REF": ref,
               "GITHUB_REPOSITORY": "o/r", "GITHUB_WORKFLOW_REF": base + caller}  # fmt: skip
        code, _ = run_bash(guard["run"], env, baked.parent / f"guard-{event}-{caller.replace('/', '_')}")
        assert (code == 0) is ok, (event, ref, caller)


def test_train_job_graph(baked: Path) -> None:
    jobs = gpu_workflows(baked)["train"]["jobs"]
    assert list(jobs) == ["start", "train", "stop"]
    caller_start, train, caller_stop = jobs["start"], jobs["train"], jobs["stop"]
    start_doc, start = called_job(baked, caller_start, "start")
    stop_doc, stop = called_job(baked, caller_stop, "stop")
    assert caller_start["permissions"] == {"contents": "read", "id-token": "write"}
    # Every output of the start job is an output of the reusable workflow, hence of train.yml's start job.
    assert start_doc["on"]["workflow_call"]["outputs"] == {
        name: {"value": f"${{{{ jobs.start.outputs.{name} }}}}"} for name in (*LAUNCH_OUTPUTS, *WAIT_OUTPUTS)
    }
    assert caller_start["with"] == {
        "instance-type": "${{ inputs.instance-type || '' }}", "spot": "${{ inputs.spot || 'default' }}",
        "commit": "${{ inputs.commit || '' }}", "attempt": "${{ inputs.attempt || '1' }}",
    }  # fmt: skip

    # start: a GitHub-hosted runner launches the instance and waits for its runner; every launch output is a
    # job output, so `stop` knows whatever `start` created even when it failed half-way.
    assert start["runs-on"] == "ubuntu-latest"
    assert start["permissions"] == {"contents": "read", "id-token": "write"}
    assert start["outputs"] == {
        **{name: f"${{{{ steps.launch.outputs.{name} }}}}" for name in LAUNCH_OUTPUTS},
        **{name: f"${{{{ steps.wait.outputs.{name} }}}}" for name in WAIT_OUTPUTS},
    }
    launch = next(s for s in start["steps"] if s.get("id") == "launch")
    assert re.search(r"gpu-runner --settings \S+ launch ", launch["run"])
    wait = start["steps"][start["steps"].index(launch) + 1]
    assert re.search(r"gpu-runner --settings \S+ wait ", wait["run"])
    assert 0 < start["timeout-minutes"] <= 30

    # train: on this run's own runner label, on the host (docs/gpu-runtime.md: no container, the locked gpu
    # extra), only `contents: read`.
    assert train["needs"] == "start"
    assert train["runs-on"] == "${{ needs.start.outputs.label }}"
    assert "container" not in train
    assert train["permissions"] == {"contents": "read"}
    gpu_settings = yaml.safe_load((baked / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    # GitHub's timeout ends the job before the instance's max lifetime (counted from boot) ends it under the
    # job: the job starts up to wait_timeout_seconds after boot, plus minutes for scheduling and cancellation.
    assert gpu_settings["max_runtime_minutes"] == int(answers_of(baked)["max_runtime_minutes"])
    boot_margin = math.ceil(gpu_settings["wait_timeout_seconds"] / 60) + 5
    assert 0 < train["timeout-minutes"] <= gpu_settings["max_runtime_minutes"] - boot_margin
    assert gpu_settings["image"] == "", "host mode: no image to pre-pull"
    (setup,) = steps_by_uses(train, SETUP_ACTION)
    assert setup["with"] == {"install": "gpu", "enable-cache": "false"}
    package = answers_of(baked)["package_name"]
    # The GPU preflight comes right after the install, before training, and nothing lets the job skip past it:
    # no `if:`, no continue-on-error; only the allow-cpu dispatch input (or the config) lets it pass on CPU.
    names = [s.get("name") for s in train["steps"]]
    preflight = train["steps"][names.index("GPU preflight")]
    assert names.index("GPU preflight") == train["steps"].index(setup) + 1 < names.index("Train")
    assert "if" not in preflight and "continue-on-error" not in preflight
    assert f"python -m {package} gpu-preflight" in preflight["run"]
    assert preflight["run"].lstrip().startswith("code=0\ntimeout ")
    assert preflight["env"] == {
        "ALLOW_CPU": "${{ inputs.allow-cpu }}",
        "CONFIG": "${{ inputs.config || 'configs/train.yaml' }}",
    }
    assert "if" not in train["steps"][names.index("Train")]
    train_step = train["steps"][names.index("Train")]
    assert f"python -m {package} train" in train_step["run"]
    assert '--config="${CONFIG}" --checkpoint-uri="${CHECKPOINT_URI}"' in train_step["run"]
    # Exit status 75 (spot interruption notice) becomes the job output the stop job's resume step reads.
    # The MLflow run id, written by the training CLI as soon as the run exists: stop logs the cost there.
    assert train["outputs"] == {
        "interrupted": "${{ steps.train.outputs.interrupted }}",
        "mlflow-run-id": "${{ steps.train.outputs.mlflow-run-id }}",
        **{f"{p}-at": f"${{{{ steps.timeline.outputs.{p}-at }}}}" for p in TIMELINE_PHASES},
        "gpu-preflight": "${{ steps.preflight.outputs.gpu-preflight }}",
    }
    # The boot timeline step runs before checkout and passes on only known names with digits.
    timeline = next(s for s in train["steps"] if s.get("id") == "timeline")
    assert train["steps"].index(timeline) < train["steps"].index(train_step)
    assert "job-started-at=$(date +%s)" in timeline["run"] and "=~ ^[0-9]{1,12}$" in timeline["run"]
    env = train_step["env"]
    assert env["CONFIG"] == "${{ inputs.config || 'configs/train.yaml' }}"
    assert env["GPU_INSTANCE_TYPE"] == "${{ needs.start.outputs.instance-type }}"
    assert env["GPU_MARKET"] == "${{ needs.start.outputs.market }}"
    assert {"MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} <= set(env)

    # stop: always (failure, cancel, timeout), after both, whenever start created anything.
    assert set(caller_stop["needs"]) == {"start", "train"}
    condition = caller_stop["if"]
    assert condition.startswith("${{ always() && ")
    for output in ("instance-id", "runner-id"):
        assert f"needs.start.outputs.{output} != ''" in condition
    assert stop["if"] == "always()"
    assert stop["runs-on"] == "ubuntu-latest"
    # actions: write = dispatching the next attempt after a spot interruption, with the run's own token.
    assert caller_stop["permissions"] == {"contents": "read", "id-token": "write", "actions": "write"}
    assert stop["permissions"] == caller_stop["permissions"]
    # What the caller passes: every input the stop workflow declares, from the start and train jobs.
    passed = caller_stop["with"]
    assert set(passed) == set(stop_doc["on"]["workflow_call"]["inputs"])
    for name in ("region", "instance-id", "runner-id", "parameter", "runner-online-at"):
        assert passed[name] == f"${{{{ needs.start.outputs.{name} }}}}"
    assert passed["mlflow-run-id"] == "${{ needs.train.outputs.mlflow-run-id }}"
    assert passed["train-interrupted"] == "${{ needs.train.outputs.interrupted }}"
    assert passed["gpu-preflight"] == "${{ needs.train.outputs.gpu-preflight }}"
    assert passed["attempt"] == "${{ inputs.attempt || '1' }}"
    assert passed["commit"] == "${{ inputs.commit || github.sha }}"
    assert caller_stop["secrets"] == {
        name: f"${{{{ secrets.{name} }}}}"
        for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
    }
    # After "Cancel workflow" only `if: always()` steps run: every step of stop must say so.
    assert all(step.get("if") == "always()" for step in stop["steps"]), stop["steps"]
    _, teardown, resume = [s for s in stop["steps"] if "run" in s]  # after reading the settings
    assert re.search(r"gpu-runner --settings \S+ teardown ", teardown["run"])
    assert re.search(r"gpu-runner --settings \S+ resume ", resume["run"])
    assert resume["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert resume["env"]["TRAIN_INTERRUPTED"] == "${{ inputs.train-interrupted }}"
    for name, output in (
        ("REGION", "region"),
        ("INSTANCE_ID", "instance-id"),
        ("RUNNER_ID", "runner-id"),
        ("PARAMETER", "parameter"),
    ):
        assert teardown["env"][name] == f"${{{{ inputs.{output} }}}}"
    # After teardown, the attempt's cost goes to the training run: its id, the attempt (its step) and MLflow.
    assert teardown["env"]["MLFLOW_RUN_ID"] == "${{ inputs.mlflow-run-id }}"
    # The stop job's summary says when the preflight stopped the training.
    assert teardown["env"]["GPU_PREFLIGHT"] == "${{ inputs.gpu-preflight }}"
    assert '"${GPU_PREFLIGHT}" == "no-gpu"' in teardown["run"] and "no GPU visible" in teardown["run"]
    # A caller on a branch may pass anything, also nothing: the defaults hold in the called workflow too.
    assert teardown["env"]["ATTEMPT"] == resume["env"]["ATTEMPT"] == "${{ inputs.attempt || '1' }}"
    assert teardown["env"]["MLFLOW_TRACKING_URI"] == "${{ vars.MLFLOW_TRACKING_URI }}"
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        assert teardown["env"][name] == f"${{{{ secrets.{name} }}}}"
    assert '"--mlflow-run-id=${MLFLOW_RUN_ID}"' in teardown["run"]
    assert '--attempt="${ATTEMPT}"' in teardown["run"]


def test_reap_meaning(baked: Path) -> None:
    reap = gpu_workflows(baked)["reap"]
    assert triggers(reap) == {"schedule", "workflow_dispatch"}
    # Hourly (issue 13 item 12): the AWS side runs every 15 minutes inside AWS; 96 GitHub jobs a day cost
    # ~2,900 minutes a month in a private repository.
    assert reap["on"]["schedule"] == [{"cron": "17 * * * *"}]
    assert reap["permissions"] == {}
    assert reap["concurrency"]["cancel-in-progress"] is False
    (job,) = reap["jobs"].values()
    # Only the default branch: a scheduled run always is (its payload has no repository.default_branch), a
    # dispatch must have picked it.
    assert job["if"] == (
        "${{ github.event_name == 'schedule' || "
        "github.ref == format('refs/heads/{0}', github.event.repository.default_branch) }}"
    )
    assert job["runs-on"] == "ubuntu-latest"
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert 0 < job["timeout-minutes"] <= 30
    (setup,) = steps_by_uses(job, SETUP_ACTION)
    assert setup["with"] == {"install": "runner", "enable-cache": "false"}
    assert [s["run"].strip() for s in job["steps"] if "run" in s] == [
        "uv run --no-sync gpu-runner --settings configs/gpu-runner.yaml workflow-settings",
        "uv run --no-sync gpu-runner --settings configs/gpu-runner.yaml reap",
    ]


def _expression_value(condition: str, values: dict[str, Any]) -> bool:
    """GitHub's expression syntax for the operators these `if:`s use (&&, ||, ==, !=, literals,
    `!cancelled()`), with each context name replaced by its value: null (None) equals neither true nor ''
    there, as in GitHub."""
    text = condition.strip().removeprefix("${{").removesuffix("}}")
    text = text.replace("!cancelled()", "True").replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"(?<!')\btrue\b(?!')", "True", text)  # the literal, not the string 'true'
    text = re.sub(r"\b(?:vars|github)\.[\w.]+", lambda m: repr(values[m[0]]), text)
    return bool(eval(text, {"__builtins__": {}}))  # the test's own workflow, every name replaced


def test_local_mlflow_store_is_uploaded_only_for_private_repositories_or_on_opt_in(baked: Path) -> None:
    """Issue 13 item 10: without an MLflow server the local store (model, checkpoints, database) would be an
    artifact anyone may download from a public repository. Uploaded only when the event's repository is
    private or on the MLFLOW_LOCAL_STORE_ARTIFACT opt-in; otherwise a warning step says why. Evaluated over
    every case."""
    train = gpu_workflows(baked)["train"]["jobs"]["train"]
    (upload,) = [s for s in train["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    (warning,) = [s for s in train["steps"] if s.get("name") == "Say why the local MLflow store was not kept"]
    assert (
        "mlflow.db" in upload["with"]["path"] and "::warning title=MLflow store not kept::" in warning["run"]
    )
    cases = 0
    for uri in ("", "https://mlflow.example.com"):
        # None: the payload has no repository.private (GitHub's push and workflow_dispatch payloads always
        # do).
        for private in (True, False, None):
            for opt_in in ("", "true", "false"):
                values = {"vars.MLFLOW_TRACKING_URI": uri, "github.event.repository.private": private,
                          "vars.MLFLOW_LOCAL_STORE_ARTIFACT": opt_in}  # fmt: skip
                expected = uri == "" and (private is True or opt_in == "true")
                assert _expression_value(upload["if"], values) is expected, values
                assert _expression_value(warning["if"], values) is (uri == "" and not expected), values
                cases += 1
    assert cases == 18


def test_aws_jobs_use_oidc_and_no_cache(baked: Path) -> None:
    """Exactly the jobs that configure AWS credentials ask for an OIDC token; they do so with the repository
    variable and the rendered region, install only the light runner package, and restore no cache."""
    aws_jobs = []
    for name, doc in gpu_workflows(baked).items():
        for job_id, job in doc["jobs"].items():
            if "uses" in job:  # a caller of a reusable workflow: its job is checked in that file
                continue
            aws_steps = steps_by_uses(job, AWS_CREDENTIALS)
            assert ("id-token" in job["permissions"]) == bool(aws_steps), f"{name}.{job_id}"
            if not aws_steps:
                continue
            aws_jobs.append(f"{name}.{job_id}")
            (aws,) = aws_steps
            # The reaper has its own role (infra/: default branch only, no launch rights).
            role = "AWS_REAPER_ROLE_ARN" if name == "reap" else "AWS_ROLE_ARN"
            assert aws["with"]["role-to-assume"] == f"${{{{ vars.{role} }}}}"
            # The region of the default branch's configs/gpu-runner.yaml, read by the step before it.
            assert aws["with"]["aws-region"] == "${{ steps.settings.outputs.region }}"
            settings_step = next(s for s in job["steps"] if s.get("id") == "settings")
            assert settings_step["run"].endswith(
                "gpu-runner --settings configs/gpu-runner.yaml workflow-settings"
            )
            assert job["steps"].index(settings_step) < job["steps"].index(aws)
            (setup,) = steps_by_uses(job, SETUP_ACTION)
            assert setup["with"] == {"install": "runner", "enable-cache": "false"}
            # Credentials exist only after the set-up, and no third-party code runs after them.
            assert job["steps"].index(setup) < job["steps"].index(aws)
            later = job["steps"][job["steps"].index(aws) + 1 :]
            assert all("run" in s for s in later), f"{name}.{job_id}: only our own commands hold the role"
        assert not cache_problems(doc), cache_problems(doc)
    assert aws_jobs == ["gpu-runner-start.start", "gpu-runner-stop.stop", "reap.reap"]


def test_no_self_hosted_runner_reachable_from_pull_requests(baked_files: dict[str, list[Path]]) -> None:
    """Across the whole generated project: a workflow with a job on a runner that is not a literal
    GitHub-hosted label has only triggers that need write access (never pull_request*, workflow_run, ...)."""
    gpu_workflow_names = set()
    for path in baked_files["workflows"]:
        doc = load_yaml(path)
        for job in doc["jobs"].values():
            runs_on = job.get("runs-on")
            labels = runs_on if isinstance(runs_on, list) else [runs_on]
            if not all(isinstance(x, str) and GITHUB_HOSTED_RE.match(x) for x in labels):
                gpu_workflow_names.add(path.name)
                assert triggers(doc) <= {"push", "workflow_dispatch"}, (path.name, triggers(doc))
        if path.name in {"train.yml", "reap.yml"}:
            assert not triggers(doc) & {*PR_EVENTS, "workflow_run", "workflow_call", "issue_comment"}
    assert gpu_workflow_names == {"train.yml"}


def test_no_expression_inside_any_run(baked_files: dict[str, list[Path]]) -> None:
    offenders = [
        f"{path.name}: {where}"
        for path in baked_files["workflows"] + baked_files["actions"]
        for where in expressions_in_run(load_yaml(path))
    ]
    assert not offenders, offenders


def test_non_default_answers_reach_the_gpu_workflows(baked_custom: Path) -> None:
    answers = answers_of(baked_custom)
    assert {k: str(answers[k]) for k in CUSTOM_ANSWERS} == {k: str(v) for k, v in CUSTOM_ANSWERS.items()}
    docs = gpu_workflows(baked_custom)
    train = docs["train"]
    assert train["on"]["push"] == {"branches": ["gpu/**"]}
    assert train["jobs"]["train"]["timeout-minutes"] == 95 - 15  # the boot margin
    regions = [
        step["with"]["aws-region"]
        for doc in docs.values()
        for job in doc["jobs"].values()
        for step in steps_by_uses(job, AWS_CREDENTIALS)
    ]
    assert regions == ["${{ steps.settings.outputs.region }}"] * 3
    settings = yaml.safe_load((baked_custom / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    assert (settings["region"], settings["train_branch_prefix"]) == ("us-east-2", "gpu/")
    # The reusable workflows are called in the custom answers' repository, and guard its train branches.
    answers = answers_of(baked_custom)
    assert train["jobs"]["start"]["uses"].startswith(f"{answers['github_owner']}/{answers['github_repo']}/")
    train_env = next(s for s in train["jobs"]["train"]["steps"] if s.get("id") == "train")["env"]
    assert train_env["AWS_REGION"] == train_env["AWS_DEFAULT_REGION"] == "${{ needs.start.outputs.region }}"


def test_the_default_branch_answer_names_what_start_and_stop_run(baked_custom: Path) -> None:
    """A repository whose default branch is not `main`: train.yml calls start/stop at that branch, they check
    it out, and `make bootstrap` / `make doctor` give the same branch to the launch and reaper roles' OIDC
    trust (`DefaultBranch`). No `main` is left over in the GPU workflows."""
    docs = gpu_workflows(baked_custom)
    jobs = docs["train"]["jobs"]
    for name in ("start", "stop"):
        called = DEFAULT_BRANCH_WORKFLOW_RE.fullmatch(jobs[name]["uses"])
        assert called and called["branch"] == "develop", jobs[name]["uses"]
        (checkout,) = steps_by_uses(docs[f"gpu-runner-{name}"]["jobs"][name], "actions/checkout")
        assert checkout["with"]["ref"] == "develop"
    for name in ("train", "gpu-runner-start", "gpu-runner-stop"):
        text = (baked_custom / ".github" / "workflows" / f"{name}.yml").read_text(encoding="utf-8")
        for leftover in ("@main", "ref: main", 'ref: "main"', "refs/heads/main"):
            assert leftover not in text, f"{name}.yml still says {leftover}"
    makefile = (baked_custom / "Makefile").read_text(encoding="utf-8")
    for target in ("bootstrap", "doctor"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
        assert recipe and "--default-branch develop " in recipe[1].replace("\\\n", " "), target


def test_linters_clean_on_non_default_answers(baked_custom: Path) -> None:
    files = github_files(baked_custom)
    code, errors = actionlint(files["workflows"], baked_custom)
    assert (code, errors) == (0, []), describe_actionlint(errors)
    code, findings = zizmor([p for group in files.values() for p in group], baked_custom)
    assert (code, findings) == (0, []), describe_zizmor(findings)
    proc = check_jsonschema("vendor.github-workflows", files["workflows"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- zizmor ignores
def inline_zizmor_ignores(project: Path) -> dict[str, list[tuple[int, str, str, str]]]:
    """file -> [(line, rule, reason, line text)] for every inline `# zizmor: ignore[...]`."""
    found: dict[str, list[tuple[int, str, str, str]]] = {}
    for path in (p for group in github_files(project).values() for p in group):
        rel = path.relative_to(project).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if m := ZIZMOR_IGNORE_RE.search(line):
                for rule in m["rules"].split(","):
                    found.setdefault(rel, []).append((number, rule.strip(), m["reason"].strip(), line))
    return found


def test_zizmor_ignores_are_exactly_the_expected_ones(baked: Path) -> None:
    found = inline_zizmor_ignores(baked)
    assert {rel: [rule for _, rule, _, _ in items] for rel, items in found.items()} == EXPECTED_ZIZMOR_IGNORES
    for items in found.values():
        for number, _rule, reason, line in items:
            assert len(reason) >= 20, f"line {number}: an ignore needs its reason on the same line"
            if _rule == "unpinned-uses":  # only the default branch's reusable workflows (issue 13 item 2)
                ref = re.match(r"^\s*uses: (\S+) #", line)
                assert ref and DEFAULT_BRANCH_WORKFLOW_RE.fullmatch(ref[1]), line
                continue
            assert re.match(rf"^\s*uses: {re.escape(SETUP_ACTION)} #", line), line


def test_zizmor_ignores_are_needed(baked: Path, baked_files: dict[str, list[Path]]) -> None:
    """With ignore comments switched off, zizmor reports exactly one finding per ignore, on that line, of that
    audit: each ignore is needed and covers nothing else."""
    files = [p for group in baked_files.values() for p in group]
    _, findings = zizmor(files, baked, ignores=False)
    reported = sorted((*zizmor_location(f, baked), f["ident"]) for f in findings)
    expected = sorted(
        (rel, number, rule)
        for rel, items in inline_zizmor_ignores(baked).items()
        for number, rule, _, _ in items
    )
    assert reported == expected, describe_zizmor(findings)


def test_zizmor_pedantic_on_gpu_files(baked: Path) -> None:
    """The pedantic persona finds only the known, documented gap (GPU image pinned by tag, not digest)."""
    files = [baked / ".github" / "workflows" / f"{name}.yml" for name in GPU_WORKFLOWS]
    files.append(baked / ".github" / "actions" / "setup" / "action.yml")
    _, findings = zizmor(files, baked, persona="pedantic")
    found = set()
    for finding in findings:
        rel, number = zizmor_location(finding, baked)
        text = (baked / rel).read_text(encoding="utf-8").splitlines()[number - 1].strip()
        found.add((rel, finding["ident"], text))
    assert found == EXPECTED_PEDANTIC_GPU_FINDINGS, describe_zizmor(findings)


# ---------------------------------------------------------------- injection
def test_untrusted_expressions_only_under_env(baked: Path) -> None:
    """Parsed train.yml and reap.yml: in every step, an expression over a branch name, event payload, input or
    output appears only under `env:` (or in a step's `if:`, evaluated by the expression engine, no shell)."""
    for name, doc in gpu_workflows(baked).items():
        for where, step in iter_steps(doc):
            for key, value in step.items():
                for text in iter_strings(value):
                    for expression in EXPRESSION_RE.findall(text):
                        if UNTRUSTED_RE.search(expression):
                            # One input of a JavaScript action (never a shell): the commit a resumed
                            # attempt checks out.
                            checkout_ref = key == "with" and step.get("uses", "").startswith(
                                "actions/checkout@"
                            )
                            checkout_ref = checkout_ref and expression == "inputs.commit || github.sha"
                            # And the region of the AWS credentials action: the default branch's settings.
                            region = key == "with" and step.get("uses", "").startswith(AWS_CREDENTIALS)
                            region = region and expression == "steps.settings.outputs.region"
                            assert key in {"env", "if"} or checkout_ref or region, (
                                f"{name}.yml {where}.{key}: ${{{{ {expression} }}}}"
                            )


def test_hostile_branch_names_and_inputs_stay_data(baked: Path, tmp_path: Path) -> None:
    """Run every `run:` script of train.yml and reap.yml as GitHub would (expressions substituted, then bash)
    with the branch `train/$(touch${IFS}pwned)` and every input and output set to a shell payload: nothing
    executes, and the payloads reach gpu-runner / the training CLI as single, unchanged arguments."""
    ran = 0
    for name, doc in gpu_workflows(baked).items():
        for where, job, step in run_steps(doc):
            env = step_env(doc, job, step, "attack")
            workdir = tmp_path / f"{name}-{where}"
            code, calls = run_bash(substitute(step["run"], "attack"), env, workdir)
            ran += 1
            assert not list(workdir.rglob("pwned")), f"{name}.yml {where}: the payload ran"
            assert code == 0, f"{name}.yml {where} failed"
            arguments = [a for argv in calls for a in argv]
            hostile = [a for a in arguments if "pwned" in a]
            # A whole argument, `--opt=value` or `--phase=name=value` (neither payload holds an "="); the one
            # composed value is the train step's checkpoint URI around the start job's bucket output.
            whole = (PAYLOAD, ATTACK_REF, f"s3://{PAYLOAD}/checkpoints")
            assert all(a.rpartition("=")[2] in whole for a in hostile), hostile
            if PAYLOAD in env.values():
                assert hostile, f"{name}.yml {where}: no hostile value reached a command (is the test stale?)"
    # 8, + the start workflow's caller guard and its own teardown when it fails (item 2), + train's "MLflow
    # store not kept" warning (item 10), + start's, stop's and reap's settings read (issue 14)
    assert ran == 14


def test_injection_harness_catches_an_expression_in_run(baked: Path, tmp_path: Path) -> None:
    """Negative control: the train step written the unsafe way (`${{ inputs.config }}` pasted into `run:`) and
    substituted by GitHub first does run the payload, so the test above would notice."""
    doc = gpu_workflows(baked)["train"]
    _, job, step = next(x for x in run_steps(doc) if '--config="${CONFIG}"' in x[2]["run"])
    unsafe = step["run"].replace('"${CONFIG}"', '"${{ inputs.config }}"')
    assert unsafe != step["run"]
    workdir = tmp_path / "unsafe"
    run_bash(substitute(unsafe, "attack"), step_env(doc, job, step, "attack"), workdir)
    assert list(workdir.rglob("pwned"))


# ---------------------------------------------------------------- gpu-runner CLI contract
def recorded_gpu_runner_calls(project: Path, scenario: str, tmp_path: Path) -> list[GpuRunnerCall]:
    calls = []
    for name, doc in gpu_workflows(project).items():
        for where, job, step in run_steps(doc):
            code, recorded = run_bash(
                substitute(step["run"], scenario),
                step_env(doc, job, step, scenario),
                tmp_path / scenario / f"{name}-{where}",
            )
            assert code == 0, f"{name}.yml {where} ({scenario})"
            calls += gpu_runner_calls(recorded)
    return calls


def test_gpu_runner_calls_follow_the_contract(baked: Path, tmp_path: Path) -> None:
    """Every `gpu-runner <subcommand> --option` the workflows really pass (dispatch with every input set, and
    a push with none / a launch that produced nothing) is in the CLI contract; required ids always passed."""
    full = recorded_gpu_runner_calls(baked, "benign", tmp_path)
    bare = recorded_gpu_runner_calls(baked, "empty", tmp_path)
    for call in full + bare:
        assert call.global_options == ["--settings"], call
        assert call.argv[:2] == ["--settings", "configs/gpu-runner.yaml"], call
        assert call.subcommand in CLI_CONTRACT, call
        assert set(call.options) <= CLI_CONTRACT[call.subcommand], call
        repeatable = [o for o in call.options if o != "--phase"]  # one --phase per timeline moment
        assert len(repeatable) == len(set(repeatable)), call
    assert {c.subcommand: set(c.options) for c in full} == CLI_CONTRACT
    # The stop job's teardown, and the start job's own when start fails (no timeline, no MLflow run yet).
    teardowns = [c for c in full if c.subcommand == "teardown"]
    (full_teardown,) = [c for c in teardowns if "--mlflow-run-id" in c.options]
    (own_teardown,) = [c for c in teardowns if c is not full_teardown]
    own_ids = {"--region", "--instance-id", "--runner-id", "--parameter", "--attempt"}
    assert set(own_teardown.options) == own_ids, own_teardown
    phases = [a.removeprefix("--phase=") for a in full_teardown.argv if a.startswith("--phase=")]
    names = [p.split("=")[0] for p in phases]
    assert names == ["boot", "image-ready", "runner-started", "runner-online", "job-started"]
    assert all(p.split("=")[1].isdigit() for p in phases), phases
    # Without inputs, launch falls back to the settings file; teardown passes only the ids it has (and the
    # attempt, 1 for a push: the MLflow step of its cost).
    assert {c.subcommand: set(c.options) for c in bare} == {
        **CLI_CONTRACT,
        "launch": {"--commit", "--attempt"},
        "teardown": {"--attempt"},
    }
    push_teardowns = [c for c in bare if c.subcommand == "teardown"]
    assert len(push_teardowns) == 2, push_teardowns
    assert all(c.argv[-1] == "--attempt=1" for c in push_teardowns), push_teardowns
    # The workflows read only outputs launch writes, and the start job passes every one of them on.
    start = (baked / ".github" / "workflows" / "gpu-runner-start.yml").read_text(encoding="utf-8")
    text = (baked / ".github" / "workflows" / "train.yml").read_text(encoding="utf-8")
    assert set(re.findall(r"steps\.launch\.outputs\.([\w-]+)", start)) == set(LAUNCH_OUTPUTS)
    assert set(re.findall(r"needs\.start\.outputs\.([\w-]+)", text)) <= set(LAUNCH_OUTPUTS + WAIT_OUTPUTS)


def test_every_value_reaches_a_cli_as_opt_equals_value(baked: Path, tmp_path: Path) -> None:
    """Issue 13 item 5: a job output or dispatch input that starts with `--` (`mlflow-run-id=--x`, written by
    code on the GPU instance) must stay a value. Every option after the subcommand, of gpu-runner and of the
    project's CLI, is passed as one `--opt=value` word, so argparse can never read the value as an option."""
    package = answers_of(baked)["package_name"]
    checked = 0
    for scenario in ("benign", "empty", "attack"):
        for name, doc in gpu_workflows(baked).items():
            for where, job, step in run_steps(doc):
                workdir = tmp_path / scenario / f"{name}-{where}"
                _, recorded = run_bash(
                    substitute(step["run"], scenario), step_env(doc, job, step, scenario), workdir
                )
                for argv in recorded:
                    if argv[:3] == ["run", "--no-sync", "gpu-runner"]:
                        tail = argv[6:]  # after `--settings configs/gpu-runner.yaml <subcommand>` (a literal)
                    elif argv[:5] == ["run", "--no-sync", "python", "-m", package]:
                        tail = argv[6:]  # after the subcommand
                    else:
                        continue
                    checked += 1
                    loose = [a for a in tail if not re.fullmatch(r"--[a-z-]+=.*", a, re.DOTALL)]
                    assert not loose, f"{name}.yml {where} ({scenario}): {argv}"
    assert checked >= 3 * 7, checked  # launch, wait, preflight, train, teardown, resume, reap; each scenario


def written_step_outputs(package: Path) -> set[str]:
    """Keys of every dict literal passed to `write_outputs(...)` in the gpu_runner sources (as the values of
    workflow_contract's LaunchOutput / WaitOutput members they name)."""
    members = {
        f"{enum}.{name}": value
        for enum in ("LaunchOutput", "WaitOutput", "SettingsOutput")
        for name, value in runner_output_keys(enum).items()
    }
    keys: set[str] = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == (
                "write_outputs"
            ):
                for arg in node.args:
                    if isinstance(arg, ast.Dict):
                        keys |= {k.value for k in arg.keys if isinstance(k, ast.Constant)}
                        keys |= {
                            members.get(ast.unparse(k).removeprefix("contract."), ast.unparse(k))
                            for k in arg.keys
                            if isinstance(k, ast.Attribute)
                        }
    return keys


@pytest.mark.skipif(
    not RUNNER_CLI.is_file(), reason="TODO: gpu_runner/cli.py not written yet (contract only)"
)
def test_launch_outputs_match_the_runner_sources(baked: Path) -> None:
    written = written_step_outputs(baked / "runner" / "src" / "gpu_runner")
    assert written, "no write_outputs({...}) call found in the gpu_runner sources: update this test"
    assert written == set(LAUNCH_OUTPUTS + WAIT_OUTPUTS + SETTINGS_OUTPUTS)


@pytest.fixture(scope="module")
def runner_installed(baked: Path) -> Path:
    """The baked project with only gpu-runner installed from its lock, as start/stop/reap install it."""
    env = {k: v for k, v in offline_env().items() if k not in {"VIRTUAL_ENV", "UV_PROJECT"}}
    sync = subprocess.run(
        [tool("uv"), "sync", "--locked", "--offline", "--package", "gpu-runner", "--no-dev"],
        cwd=baked,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert sync.returncode == 0, sync.stderr[-4000:]
    return baked


def gpu_runner(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, offline, with no GitHub repository, credentials or instance metadata."""
    env = {
        k: v
        for k, v in offline_env().items()
        if k not in {"VIRTUAL_ENV", "UV_PROJECT", "GITHUB_REPOSITORY"} and not k.startswith(("AWS_", "GPU_"))
    }
    env |= {"UV_OFFLINE": "1", "AWS_EC2_METADATA_DISABLED": "true"}
    return subprocess.run(
        [tool("uv"), "run", "--no-sync", "gpu-runner", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def help_options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)) - {"--help"}


@pytest.mark.skipif(
    not RUNNER_CLI.is_file(), reason="TODO: gpu_runner/cli.py not written yet (contract only)"
)
def test_gpu_runner_cli_help_matches_the_contract(runner_installed: Path) -> None:
    top = gpu_runner(runner_installed, "--help")
    assert top.returncode == 0, top.stderr
    assert help_options(top.stdout) >= CLI_GLOBAL_OPTIONS
    for subcommand, options in CLI_CONTRACT.items():
        assert subcommand in top.stdout
        sub = gpu_runner(runner_installed, subcommand, "--help")
        assert sub.returncode == 0, sub.stderr
        assert options <= help_options(sub.stdout), (subcommand, sub.stdout)


@pytest.mark.skipif(
    not RUNNER_CLI.is_file(), reason="TODO: gpu_runner/cli.py not written yet (contract only)"
)
def test_gpu_runner_cli_parses_every_workflow_command_line(runner_installed: Path, tmp_path: Path) -> None:
    """Each command line the workflows produce, given to the real CLI: argparse accepts it (exit 2 with
    `usage:` would mean it did not). With no GITHUB_REPOSITORY the CLI stops right after loading the settings,
    before any API call; the settings file and the dispatch's instance type are validated on the way."""
    calls = recorded_gpu_runner_calls(runner_installed, "benign", tmp_path)
    calls += recorded_gpu_runner_calls(runner_installed, "empty", tmp_path)
    seen = set()
    for call in calls:
        if call.subcommand == "wait" and "" in call.argv:
            continue  # only runs after a launch that wrote its outputs
        if tuple(call.argv) in seen:
            continue
        seen.add(tuple(call.argv))
        proc = gpu_runner(runner_installed, *call.argv)
        assert proc.returncode != 2 and "usage:" not in proc.stderr, (call.argv, proc.stderr)
        assert "GITHUB_REPOSITORY" in proc.stderr, (call.argv, proc.stderr)
    # Negative control: an option the CLI does not have is rejected by the same check.
    proc = gpu_runner(runner_installed, "--settings", "configs/gpu-runner.yaml", "launch", "--bogus=1")
    assert proc.returncode == 2 and "usage:" in proc.stderr
    # The dispatch input `instance-type` is validated by the CLI before anything else happens.
    hostile = [
        c for c in recorded_gpu_runner_calls(runner_installed, "attack", tmp_path) if c.subcommand == "launch"
    ]
    assert [c.options for c in hostile] == [["--commit", "--attempt", "--instance-type"]]
    proc = gpu_runner(runner_installed, *hostile[0].argv)
    assert proc.returncode == 1 and "is not an instance type" in proc.stderr, proc.stderr
    assert "GITHUB_REPOSITORY" not in proc.stderr
