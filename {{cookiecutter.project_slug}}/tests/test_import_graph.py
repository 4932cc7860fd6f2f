"""The import graph of both packages keeps the contracts in pyproject.toml [tool.importlinter] (import-linter, also
in `make lint`), a planted violation of each breaks it, and importing the CLI loads neither TensorFlow nor MLflow."""

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
    # naming imports workflow_contract, which imports naming: a cycle.
    "acyclic": (
        "gpu_runner/core/naming.py",
        "from gpu_runner.core import workflow_contract",
        "No cycles are allowed in gpu_runner.core.",
    ),
    "tensorflow": (f"{PACKAGE}/tracking.py", "import tensorflow", f"{PACKAGE}.tracking -> tensorflow"),
    "distributions": (
        "gpu_runner/core/settings.py",
        f"import {PACKAGE}",
        f"gpu_runner.core.settings -> {PACKAGE}",
    ),
    # The reaper Lambda zips gpu_runner: a double imported from it would fail only in AWS.
    "runtime-without-doubles": (
        "gpu_runner/core/errors.py",
        "import gpu_runner_testing",
        "gpu_runner.core.errors -> gpu_runner_testing",
    ),
    "ml-layers": (f"{PACKAGE}/errors.py", "from . import config", f"{PACKAGE}.errors -> {PACKAGE}.config"),
    # The backend interface naming one of its implementations.
    "runner-rooms": (
        "gpu_runner/backend.py",
        "from gpu_runner.ec2_runner import ec2",
        "gpu_runner.backend -> gpu_runner.ec2_runner.ec2",
    ),
    "backends": (
        "gpu_runner/batch/batch_jobs.py",
        "from gpu_runner.ec2_runner import ec2",
        "gpu_runner.batch.batch_jobs -> gpu_runner.ec2_runner.ec2",
    ),
    "core-layers": (
        "gpu_runner/core/aws.py",
        "from gpu_runner.core import naming",
        "gpu_runner.core.aws -> gpu_runner.core.naming",
    ),
    "ec2-runner-layers": (
        "gpu_runner/ec2_runner/ec2.py",
        "from gpu_runner.ec2_runner import ssm",
        "gpu_runner.ec2_runner.ec2 -> gpu_runner.ec2_runner.ssm",
    ),
    "batch-layers": (
        "gpu_runner/batch/batch_run.py",
        "from gpu_runner.batch import batch_source",
        "gpu_runner.batch.batch_run -> gpu_runner.batch.batch_source",
    ),
    "mlflow-server-layers": (
        "gpu_runner/mlflow_server/mlflow_server_access.py",
        "from gpu_runner.mlflow_server import mlflow_server_project",
        "gpu_runner.mlflow_server.mlflow_server_access -> gpu_runner.mlflow_server.mlflow_server_project",
    ),
    "doctor-layers": (
        "gpu_runner/doctor/doctor_aws.py",
        "from gpu_runner.doctor import doctor_mlflow",
        "gpu_runner.doctor.doctor_aws -> gpu_runner.doctor.doctor_mlflow",
    ),
    "setup-layers": (
        "gpu_runner/setup/trust_size.py",
        "from gpu_runner.setup import lambda_zip",
        "gpu_runner.setup.trust_size -> gpu_runner.setup.lambda_zip",
    ),
    "pin-layers": (
        "gpu_runner/pin/changelog.py",
        "from gpu_runner.pin import update",
        "gpu_runner.pin.changelog -> gpu_runner.pin.update",
    ),
    "pr-comment-layers": (
        "gpu_runner/pr_comment/pr_report.py",
        "from gpu_runner.pr_comment import pr_comment",
        "gpu_runner.pr_comment.pr_report -> gpu_runner.pr_comment.pr_comment",
    ),
    "cost-layers": (
        "gpu_runner/cost/record.py",
        "from gpu_runner.cost import chart",
        "gpu_runner.cost.record -> gpu_runner.cost.chart",
    ),
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
        f"import {PACKAGE}.tracking, {PACKAGE}.checkpoints, {PACKAGE}.interruption\n"
        f"print(json.dumps(dict(cli=cli, free={heavy})))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert loaded["cli"] == [], loaded
    # The check can fail: it sees the MLflow that tracking imports.
    assert loaded["free"] == ["mlflow"], loaded
