"""Fixtures of the workflow checks: this project's own GitHub files, read where they are, and a planted copy."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_runner_testing.workflow_checks.planted_violations import plant_violations
from gpu_runner_testing.workflow_checks.workflow_files import checked_github_files, load_pins

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def project() -> Path:
    """The project root: the checks read its files as they are now (a user's edit included)."""
    return PROJECT


@pytest.fixture(scope="session")
def project_files(project: Path) -> dict[str, list[Path]]:
    return checked_github_files(project)


@pytest.fixture(scope="session")
def bad_project(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project's .github with a deliberately bad workflow, composite action and Dependabot file."""
    return plant_violations(project, tmp_path_factory.mktemp("bad") / project.name)


@pytest.fixture(scope="session")
def pins() -> dict[tuple[str, str], str]:
    return load_pins()
