"""The import graph of the project's package keeps the contracts in pyproject.toml [tool.importlinter]
(import-linter, also in `make lint`), a planted violation of each breaks it, and importing the CLI loads neither
TensorFlow nor MLflow. The platform's own contracts are checked in the template repository
(platform/tests/test_import_contracts.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
PACKAGE = "{{ cookiecutter.package_name }}"
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
CONTRACTS = tomllib.loads((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
    "contracts"
]
# One planted import per contract (module, line appended to it, what the report then says), each breaking only
# its own contract, written into a temporary copy of the packages.
PLANTED = {
    # config imports nothing of the package; runtime imports config: a cycle.
    "acyclic": (f"{PACKAGE}/config.py", "from . import runtime", f"No cycles are allowed in {PACKAGE}."),
    "tensorflow": (f"{PACKAGE}/evaluate.py", "import tensorflow", f"{PACKAGE}.evaluate -> tensorflow"),
    "distributions": (
        "gpu_runner/core/settings.py",
        f"import {PACKAGE}",
        f"gpu_runner.core.settings -> {PACKAGE}",
    ),
    "runtime-without-doubles": (
        f"{PACKAGE}/data.py",
        "import gpu_runner_testing",
        f"{PACKAGE}.data -> gpu_runner_testing",
    ),
    "ml-layers": (f"{PACKAGE}/errors.py", "from . import config", f"{PACKAGE}.errors -> {PACKAGE}.config"),
}


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    # COLUMNS: import-linter prints through rich, which cuts lines to 80 columns off a terminal (a long package
    # name then hides the evidence the planted-import test looks for).
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(pythonpath or ""), "COLUMNS": "500"}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(next(iter(spec.submodule_search_locations)))


def test_both_packages_keep_every_import_contract() -> None:
    result = lint_imports(PROJECT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_a_planted_import_breaks_each_contract(tmp_path: Path) -> None:
    assert set(PLANTED) == {contract["id"] for contract in CONTRACTS}, (
        "every contract needs its planted violation"
    )
    site = tmp_path / "site"
    for name in (PACKAGE, "gpu_runner"):
        shutil.copytree(package_dir(name), site / name, ignore=shutil.ignore_patterns("__pycache__"))
    for module, line, _ in PLANTED.values():
        with open(site / module, "a", encoding="utf-8") as handle:
            handle.write(f"\n{line}\n")
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    # The copy comes first on sys.path, before the installed (editable) packages.
    result = lint_imports(tmp_path, pythonpath=site)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"Contracts: 0 kept, {len(CONTRACTS)} broken." in result.stdout, result.stdout
    for _, _, evidence in PLANTED.values():
        assert evidence in result.stdout, (evidence, result.stdout)


@pytest.mark.slow
def test_importing_the_cli_loads_neither_tensorflow_nor_mlflow() -> None:
    """What the TensorFlow contract is for, observed in a fresh interpreter: the CLI's --help, check-config and
    the GPU preflight start without TensorFlow or MLflow, and the MLflow, S3 and spot-notice code imports without
    TensorFlow. (Only these: importing every module would add seconds of MLflow, scikit-learn and matplotlib.)"""
    heavy = "sorted(m for m in ('tensorflow', 'keras', 'mlflow') if m in sys.modules)"
    script = (
        f"import json, sys\nimport {PACKAGE}.cli\ncli = {heavy}\n"
        "import gpu_job.tracking, gpu_job.checkpoints, gpu_job.interruption\n"
        f"print(json.dumps(dict(cli=cli, free={heavy})))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert loaded["cli"] == [], loaded
    # The check can fail: it sees the MLflow that tracking imports.
    assert loaded["free"] == ["mlflow"], loaded
