"""GitHub Actions files of the baked project (and of this template repository) pass real, offline linters.

Four independent checks, each with a negative control so that none can pass silently:
- actionlint (with shellcheck on the `run:` scripts and the local setup action resolved),
- zizmor --offline (workflow security: pinning, injection, credentials, permissions, Dependabot),
- check-jsonschema with the vendored GitHub workflow / action / Dependabot schemas,
- structural rules on the parsed YAML that no linter enforces (pins from tests/action_pins.json with matching
  `# vX.Y.Z` comments, `permissions: {}` at the top, timeouts, no self-hosted runner reachable from a PR).
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


def zizmor(files: list[Path], cwd: Path, persona: str = "regular") -> tuple[int, list[dict[str, Any]]]:
    """Run zizmor offline on explicit files. `--no-config`: a project config cannot switch audits off; only
    inline `# zizmor: ignore[...]` comments (visible in review) are honoured."""
    proc = run(
        [
            tool("zizmor"),
            "--offline",
            "--no-config",
            "--no-progress",
            "--format",
            "json",
            f"--persona={persona}",
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


def describe_zizmor(findings: list[dict[str, Any]]) -> str:
    lines = []
    for f in findings:
        loc = f["locations"][0]
        path = loc["symbolic"]["key"].get("Local", {}).get("verbatim_path", "?")
        row = loc["concrete"]["location"]["start_point"]["row"] + 1
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
    return problems


def make_targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile.read_text(encoding="utf-8"), re.MULTILINE))


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project rendered with default answers, made a git repository: actionlint resolves local actions
    (`./.github/actions/setup`) only inside a repository."""
    out = tmp_path_factory.mktemp("baked")
    project = Path(cookiecutter(str(REPO_ROOT), no_input=True, output_dir=str(out)))
    if not (project / ".git").exists():
        subprocess.run([tool("git"), "init", "--quiet", str(project)], check=True, env=offline_env())
    return project


@pytest.fixture(scope="module")
def baked_files(baked: Path) -> dict[str, list[Path]]:
    files = github_files(baked)
    names = {p.relative_to(baked).as_posix() for group in files.values() for p in group}
    assert {
        ".github/workflows/ci.yml",
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


def test_setup_action_meaning(baked: Path) -> None:
    action = load_yaml(baked / ".github" / "actions" / "setup" / "action.yml")
    assert action["runs"]["using"] == "composite"
    assert action["inputs"]["python-version"]["default"] == "3.11"
    assert action["inputs"]["extra"]["default"] == "cpu"
    uv_step, sync_step = action["runs"]["steps"]
    assert uv_step["uses"].startswith("astral-sh/setup-uv@")
    assert uv_step["with"] == {
        "enable-cache": True,
        "python-version": "${{ inputs.python-version }}",
        "cache-dependency-glob": "uv.lock",
    }
    # Inputs reach the shell through env only.
    assert sync_step["shell"] == "bash"
    assert sync_step["env"] == {"EXTRA": "${{ inputs.extra }}"}
    assert sync_step["run"].strip() == 'uv sync --locked --extra "$EXTRA"'
    assert "${{" not in sync_step["run"]


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
    assert {"test", "test-matrix"} <= make_targets(makefile)


def test_template_ci_meaning(template_workflows: list[Path]) -> None:
    ci = load_yaml(REPO_ROOT / ".github" / "workflows" / "ci.yml")
    assert triggers(ci) == {"push", "pull_request"}
    assert "${{ github.ref }}" in ci["concurrency"]["group"]
    jobs = ci["jobs"]
    assert jobs["test-matrix"]["needs"] == "test"
    for job_id, command in (("test", "make test"), ("test-matrix", "make test-matrix")):
        job = jobs[job_id]
        assert job["runs-on"] == "ubuntu-latest"
        setup_python = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
        assert [s["with"]["python-version"] for s in setup_python] == ["3.11"]
        assert [s["run"] for s in job["steps"] if "run" in s] == [command]
