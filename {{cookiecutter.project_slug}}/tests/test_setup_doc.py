"""docs/setup.md against the platform this project pins: the Preflight table names every check `make doctor`
prints, the "Secrets and variables" table every setting doctor checks and the workflows read, and every setup
section a doctor fix points to exists. promote.yml runs in the environment doctor checks.

What doctor does with each of them is the platform's test (`platform/tests/runner/test_doctor.py` and
`test_doctor_guards.py` in the template repository, against the stack deployed to moto and the GitHub double);
that a full run prints exactly `EVERY_CHECK` is asserted there."""

from __future__ import annotations

import re

import yaml
from gpu_runner_testing.doctor_report import EVERY_CHECK
from gpu_runner_testing.platform_tree import platform_tree
from project_package import PROJECT_DIR

from gpu_runner.doctor import doctor_branch, doctor_github, doctor_repository

SETUP = PROJECT_DIR / "docs" / "setup.md"


def test_the_preflight_table_lists_every_check_doctor_prints() -> None:
    """The quota row names both codes; every other row is one check."""
    section = SETUP.read_text(encoding="utf-8").split("## Preflight: `make doctor`", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| ", section, flags=re.MULTILINE)[1:]  # after the header
    listed = set()
    for row in rows:
        if row.startswith("vCPU quota"):
            listed |= {f"vCPU quota {code}" for code in re.findall(r"`(L-[0-9A-F]+)`", row)}
        else:
            listed.add(row)
    assert listed == set(EVERY_CHECK)


def setup_table() -> dict[str, str]:
    """name -> kind from the "Secrets and variables" table of docs/setup.md."""
    section = SETUP.read_text(encoding="utf-8").split("## Secrets and variables", 1)[1].split("\n#", 1)[0]
    table: dict[str, str] = {}
    for row in re.findall(r"^\| (`.+?) \| (\w+) \|", section, flags=re.MULTILINE):
        for name in re.findall(r"`([A-Z_]+)`", row[0]):
            table[name] = row[1].rstrip("s")
    return table


def workflow_uses() -> dict[str, str]:
    uses: dict[str, str] = {}
    # The project's workflows and the platform's it calls at its pin (start, stop, batch.yml read the roles).
    platform = platform_tree(PROJECT_DIR, PROJECT_DIR / ".e2e-cache") / ".github" / "workflows"
    called = [platform / f"{name}.yml" for name in ("gpu-runner-start", "gpu-runner-stop", "batch")]
    for workflow in [*(PROJECT_DIR / ".github" / "workflows").glob("*.yml"), *called]:
        text = workflow.read_text(encoding="utf-8")
        uses |= {name: "variable" for name in re.findall(r"\bvars\.([A-Z_]+)", text)}
        uses |= {
            name: "secret" for name in re.findall(r"\bsecrets\.([A-Z_]+)", text) if name != "GITHUB_TOKEN"
        }
    # promote.yml's MLflow credentials are secrets of the `production` environment, not of the repository.
    return {name: kind for name, kind in uses.items() if not name.startswith("MLFLOW_PROMOTE_")}


def test_the_checked_names_are_the_setup_docs_and_the_workflows() -> None:
    assert setup_table() == doctor_github.REPOSITORY_SETTINGS
    assert workflow_uses() == doctor_github.REPOSITORY_SETTINGS
    # The parser is not vacuous: it sees every row (the roles, the MLflow tunnel role, the Batch submit role).
    assert len(setup_table()) == 12


def test_every_setup_section_a_fix_names_exists() -> None:
    headings = set(re.findall(r"^### (.+)$", SETUP.read_text(encoding="utf-8"), flags=re.MULTILINE))
    fixes = " ".join(
        [doctor_branch.RULESET_FIX, doctor_repository.ENVIRONMENT_FIX, doctor_repository.PUBLIC_FORK_FIX]
    )
    named = set(re.findall(r"docs/setup\.md, '([^']+)'", fixes))
    assert named and named <= headings, named - headings


def test_doctor_checks_the_environment_promote_yml_runs_in() -> None:
    workflow = yaml.safe_load(
        (PROJECT_DIR / ".github" / "workflows" / "promote.yml").read_text(encoding="utf-8")
    )
    environments = {job.get("environment") for job in workflow["jobs"].values()} - {None}
    assert environments == {doctor_repository.PROMOTE_ENVIRONMENT}
