"""What is about the template in its GitHub files: the template's own CI workflow, that the project's GitHub
files render, that non-default answers reach them, and that the pin table is the team's.

The checks that guard the project's workflows (actionlint, zizmor, schemas, the structural rules, what the
GPU workflows mean, the injection harness, the gpu-runner CLI contract) are the platform's
`gpu_runner_testing.workflow_checks`: a bake's `tests/workflows/` applies them to its own files at test time
(tests/test_generated_project.py runs them), and this repository's own workflows (ci.yml and the platform's
start, stop and batch.yml) are linted here by the same modules; what the platform's three mean and run is
tests/test_platform_workflows.py's and tests/test_platform_workflow_scripts.py's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import bake_project, platform_git_env
from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    CONTRACTS_FILE,
    answers_of,
    checked_github_files,
    github_files,
    gpu_workflows,
    load_pins,
    load_yaml,
    make_targets,
    platform_call,
    steps_by_uses,
    triggers,
    workflow_path,
)
from gpu_runner_testing.workflow_checks.workflow_linters import (
    actionlint,
    check_jsonschema,
    describe_actionlint,
    describe_zizmor,
    zizmor,
)
from gpu_runner_testing.workflow_checks.workflow_rules import SHA_RE, workflow_problems

REPO_ROOT = Path(__file__).resolve().parents[1]
PINS_FILE = Path(__file__).with_name("action_pins.json")
# The team's source of truth; absent in a plain clone of the template, so that check is skipped there.
ACTIONS_MD = REPO_ROOT.parent / "shared" / "ACTIONS.md"
# The platform's source (issue 31: in this repository, not in the bake): what the injection check imports.
PLATFORM_SRC = Path(__file__).resolve().parents[1] / "platform" / "src"


def load_team_pins() -> dict[tuple[str, str], str]:
    """(owner/repo, sha) -> version, from tests/action_pins.json (the copy of ACTIONS.md)."""
    data = json.loads(PINS_FILE.read_text(encoding="utf-8"))
    return {(p["action"], p["sha"]): p["version"] for p in data["pins"]}


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project rendered with default answers."""
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


@pytest.fixture(scope="module")
def baked_files(baked: Path) -> dict[str, list[Path]]:
    return checked_github_files(baked)


@pytest.fixture(scope="module")
def template_workflows() -> list[Path]:
    files = github_files(REPO_ROOT)["workflows"]
    assert REPO_ROOT / ".github" / "workflows" / "ci.yml" in files
    return files


@pytest.fixture(scope="module")
def pins() -> dict[tuple[str, str], str]:
    return load_team_pins()


# ---------------------------------------------------------------- rendering
# ---------------------------------------------------------------- rendering
def test_github_files_rendered_and_parse(baked_files: dict[str, list[Path]]) -> None:
    for path in (p for group in baked_files.values() for p in group):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?<!\$)\{\{|\{%|\{#", text), f"unrendered Jinja in {path}"
        assert isinstance(load_yaml(path), dict), path


# ---------------------------------------------------------------- the template's own workflows
def test_actionlint_clean_on_template_workflows(template_workflows: list[Path]) -> None:
    code, errors = actionlint(template_workflows, REPO_ROOT)
    assert (code, errors) == (0, []), describe_actionlint(errors)


def test_zizmor_clean_on_template_workflows(template_workflows: list[Path]) -> None:
    code, findings = zizmor(template_workflows, REPO_ROOT)
    assert (code, findings) == (0, []), describe_zizmor(findings)


def test_zizmor_auditor_clean_on_template_workflows(template_workflows: list[Path]) -> None:
    """The thin CI files this template owns pass even the auditor persona (every audit, pedantic ones too)."""
    code, findings = zizmor(template_workflows, REPO_ROOT, persona="auditor")
    assert (code, findings) == (0, []), describe_zizmor(findings)


def test_schemas_template(template_workflows: list[Path]) -> None:
    for schema in ("vendor.github-workflows", "custom.github-workflows-require-timeout"):
        proc = check_jsonschema(schema, template_workflows)
        assert proc.returncode == 0, f"{schema}:\n{proc.stdout}{proc.stderr}"


def test_structure_template(template_workflows: list[Path], pins: dict[tuple[str, str], str]) -> None:
    problems = [f"{p.name}: {msg}" for p in template_workflows for msg in workflow_problems(p, pins)]
    assert not problems, "\n".join(problems)


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


# ---------------------------------------------------------------- the pin table
def test_pins_file_matches_actions_md() -> None:
    """tests/action_pins.json is a copy of the team's ACTIONS.md; when that file is at hand, they agree."""
    if not ACTIONS_MD.is_file():
        pytest.skip(f"{ACTIONS_MD} not present (plain clone of the template)")
    text = ACTIONS_MD.read_text(encoding="utf-8")
    pins = load_team_pins()
    assert set(re.findall(r"\b[0-9a-f]{40}\b", text)) == {sha for _, sha in pins}
    for action, sha, version in re.findall(r"uses: ([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # (v[\w.]+)", text):
        assert pins.get((action, sha)) == version, (action, sha)
    assert all(SHA_RE.match(sha) and re.match(r"^v\d+\.\d+\.\d+$", v) for (_, sha), v in pins.items())


def test_the_projects_pin_table_is_the_teams() -> None:
    """The project's checks read the pins and their versions from the platform's action_contracts.json:
    exactly the team's pins, each with the team's version."""
    assert load_pins(CONTRACTS_FILE) == load_team_pins()


# ---------------------------------------------------------------- non-default answers
@pytest.fixture
def platform_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a bake's platform workflows fetches its pinned commit (gpu_runner_testing.platform_tree): from
    this checkout, as its uv does."""
    for key, value in platform_git_env().items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("platform_fetch")
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
    # reap and sweep.yml's plan and collect: each the settings' region, read by its job (the platform's start,
    # stop and batch.yml read it the same way: tests/test_platform_workflows.py).
    assert regions == ["${{ steps.settings.outputs.region }}"] * 3
    settings = yaml.safe_load((baked_custom / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    assert (settings["region"], settings["train_branch_prefix"]) == ("us-east-2", "gpu/")
    # The reusable workflows are the platform's, called at the bake's pin, and guard its train branches.
    assert train["jobs"]["start"]["uses"] == platform_call(baked_custom, "gpu-runner-start")
    train_env = next(s for s in train["jobs"]["train"]["steps"] if s.get("id") == "train")["env"]
    assert train_env["AWS_REGION"] == train_env["AWS_DEFAULT_REGION"] == "${{ needs.start.outputs.region }}"


@pytest.mark.usefixtures("platform_fetch")
def test_the_default_branch_answer_names_what_start_and_stop_run(baked_custom: Path) -> None:
    """A repository whose default branch is not `main`: train.yml calls the platform's start/stop at the
    pin, which (with the pull-request comment jobs) check that branch out, and `make bootstrap` and `make
    doctor` give the same branch to the reaper and predict roles' OIDC trust (`DefaultBranch`). No `main` is
    left over in the GPU workflows."""
    docs = gpu_workflows(baked_custom)
    jobs = docs["train"]["jobs"]
    for name in ("start", "stop"):
        assert jobs[name]["uses"] == platform_call(baked_custom, f"gpu-runner-{name}")
    # What they (and batch.yml) check out is the branch GitHub's event names: they take no answer at all, so
    # one file, the platform's, serves every project (issue 31). The bake's own suite runs that step's rows.
    for name in ("gpu-runner-start", "gpu-runner-stop", "batch"):
        text = workflow_path(baked_custom, name).read_text(encoding="utf-8")
        assert "develop" not in text and answers_of(baked_custom)["package_name"] not in text, name
        (checkout, *_) = steps_by_uses(
            next(iter(load_yaml(workflow_path(baked_custom, name))["jobs"].values())), "actions/checkout"
        )
        assert checkout["with"]["ref"] == "${{ steps.default.outputs.branch }}", name
    # The pull-request comment jobs run that branch's gpu-runner too (issue 17).
    for workflow in ("train", "sweep"):
        (checkout,) = steps_by_uses(docs[workflow]["jobs"]["comment"], "actions/checkout")
        assert checkout["with"]["ref"] == "develop", workflow
    # The batch backend's batch.yml too: train.yml and sweep.yml call the platform's at the pin.
    for workflow in ("train", "sweep"):
        assert docs[workflow]["jobs"]["batch"]["uses"] == platform_call(baked_custom, "batch"), workflow
    for name in ("train", "sweep", "gpu-runner-start", "gpu-runner-stop", "batch"):
        text = workflow_path(baked_custom, name).read_text(encoding="utf-8")
        for leftover in ("@main", "ref: main", 'ref: "main"', "refs/heads/main"):
            assert leftover not in text, f"{name}.yml still says {leftover}"
    makefile = (baked_custom / "Makefile").read_text(encoding="utf-8")
    for target in ("bootstrap", "doctor"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
        assert recipe and "--default-branch develop " in recipe[1].replace("\\\n", " "), target


# ---------------------------------------------------------------- the injection test, on a hostile name
# What a new user typed (issue 30): every shell metacharacter is dropped from the slug, but the word `pwned`
# stays in the package name, which the workflows pass to commands.
HOSTILE_NAME = 'Zoë\'s "Vision" Lab $(touch /tmp/acc-pwned)'


def test_the_injection_test_passes_on_a_project_named_like_its_payload(tmp_path: Path) -> None:
    """The project's own workflow-injection test, run in a bake of that name: its payload marker is one no
    answer can produce, so only a payload the harness planted counts as hostile (with a fixed marker word,
    every call of the package looked like an injected argument and the user's first `make test` failed)."""
    project = bake_project(tmp_path, project_name=HOSTILE_NAME)
    package = answers_of(project)["package_name"]
    assert "pwned" in package, package  # the case this test is about
    workflows = project / "tests" / "workflows"
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")  # not the project's: its addopts name its own plugins
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", str(workflows / "test_workflow_injection.py"), "-q",
            "-c", str(ini), "--rootdir", str(project), "--confcutdir", str(workflows),
            "-p", "no:cacheprovider",
        ],
        cwd=project, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, **platform_git_env(),
             "PYTHONPATH": os.pathsep.join([str(workflows), str(PLATFORM_SRC)])},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout, result.stdout[-2000:]
