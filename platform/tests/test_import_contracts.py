"""The platform's import graph keeps the contracts in platform/pyproject.toml [tool.importlinter] (import-linter):
its families are rooms layered top down, the two GPU backends never import each other, the launch code and the
job library never import each other, only the GPU preflight imports TensorFlow, and nothing imports the doubles.
A planted violation of each breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

PLATFORM = Path(__file__).resolve().parents[1]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
CONTRACTS = tomllib.loads((PLATFORM / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
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
    # The reaper Lambda zips gpu_runner: a double imported from it would fail only in AWS.
    "runtime-without-doubles": (
        "gpu_runner/core/errors.py",
        "import gpu_runner_testing",
        "gpu_runner.core.errors -> gpu_runner_testing",
    ),
    # The job library reaching for the launch code (which a training job has no use for).
    "tensorflow": ("gpu_job/s3sync.py", "import tensorflow", "gpu_job.s3sync -> tensorflow"),
    "launch-without-job": ("gpu_job/rendezvous.py", "import gpu_runner", "gpu_job.rendezvous -> gpu_runner"),
    "job-layers": (
        "gpu_job/interruption.py",
        "from gpu_job import checkpoints",
        "gpu_job.interruption -> gpu_job.checkpoints",
    ),
    # The sweep file's schema reaching up for the plan that reads it.
    "sweep-layers": (
        "gpu_job/sweep/space.py",
        "from gpu_job.sweep import plan",
        "gpu_job.sweep.space -> gpu_job.sweep.plan",
    ),
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


def lint_imports(pythonpath: Path) -> subprocess.CompletedProcess:
    """lint-imports on platform/'s contracts, the packages found first on `pythonpath`. COLUMNS: import-linter
    prints through rich, which cuts lines to 80 columns off a terminal (hiding the evidence looked for)."""
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(pythonpath), "COLUMNS": "500"}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo", "--config", str(PLATFORM / "pyproject.toml")],
        cwd=PLATFORM,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_platform_keeps_every_import_contract() -> None:
    result = lint_imports(PLATFORM / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_every_layers_contract_is_exhaustive() -> None:
    """A layers contract places every module: a new one has no place until it is added."""
    layers = [contract["id"] for contract in CONTRACTS if contract["type"] == "layers"]
    assert layers and [c["id"] for c in CONTRACTS if c["type"] == "layers" and not c.get("exhaustive")] == []
    assert {"runner-rooms", "job-layers"} <= set(layers)


def test_a_planted_import_breaks_each_contract(tmp_path: Path) -> None:
    assert set(PLANTED) == {contract["id"] for contract in CONTRACTS}, (
        "every contract needs its planted violation"
    )
    site = tmp_path / "site"
    for name in ("gpu_runner", "gpu_job", "gpu_runner_testing"):
        shutil.copytree(PLATFORM / "src" / name, site / name, ignore=shutil.ignore_patterns("__pycache__"))
    for module, line, _ in PLANTED.values():
        with open(site / module, "a", encoding="utf-8") as handle:
            handle.write(f"\n{line}\n")
    result = lint_imports(site)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"Contracts: 0 kept, {len(CONTRACTS)} broken." in result.stdout, result.stdout
    for _, _, evidence in PLANTED.values():
        assert evidence in result.stdout, (evidence, result.stdout)
