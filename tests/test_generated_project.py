"""Install baked projects from their lock and run their own lint and test suites, as a user would."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import write_config
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.generated

COMBINATIONS = {
    "defaults": {},
    # A long package name exercises line lengths the formatter must already accept; no licence file;
    # on-demand only; another branch prefix.
    "custom": {
        "project_name": "Retina Scan Classifier Experiments",
        "package_name": "retina_scan_classifier_experiments",
        "license": "Proprietary",
        "use_spot": False,
        "train_branch_prefix": "gpu/",
        "mlflow_experiment_name": 'retina "scans" — v2',
    },
}


def make(project: Path, *targets: str) -> subprocess.CompletedProcess:
    # A baked project is its own world: no outer venv, no MAKEFLAGS/MAKELEVEL from the template's make.
    inherited = ("VIRTUAL_ENV", "UV_PROJECT", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    result = subprocess.run(
        ["make", *targets], cwd=project, capture_output=True, text=True, env=env, timeout=1200
    )
    assert result.returncode == 0, (
        f"make {' '.join(targets)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


@pytest.mark.parametrize("name", COMBINATIONS)
def test_baked_project_installs_lints_and_passes_its_own_tests(name: str, tmp_path: Path) -> None:
    project = Path(
        cookiecutter(
            str(ROOT),
            no_input=True,
            output_dir=str(tmp_path),
            extra_context=COMBINATIONS[name],
            config_file=str(write_config(tmp_path / "cookiecutter")),
        )
    )
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    make(project, "lock-check")
    make(project, "install")
    make(project, "lint")
    result = make(project, "test", "PYTEST_ARGS=-q -p no:cacheprovider")
    summary = re.findall(r"^=*\s*(\d+ passed.*?)\s*=*$", result.stdout, flags=re.MULTILINE)
    assert summary, result.stdout[-2000:]
    assert "failed" not in summary[-1] and "error" not in summary[-1], summary[-1]
