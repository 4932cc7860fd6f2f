"""`gpu-runner mlflow-server requirements`: compile the hash-pinned requirements the team MLflow server's first boot
installs with `pip install --require-hashes --only-binary=:all:` (mlflow-server.yaml).

mlflow[auth] and boto3 at the versions a uv.lock pins, with their whole dependency closure, every other package
held to that lock's version too where the lock has it (`uv export` as constraints: the server runs what the tests
ran), resolved by `uv pip compile` for the server's platform: CPython 3.11 on Amazon Linux 2023 x86_64, whose glibc
2.34 takes manylinux_2_34 wheels (AL2023 User Guide, "Amazon Linux 2023 core packages": glibc 2.34). Every wheel of
each pinned version gets its sha256 (uv's --generate-hashes). Needs PyPI.

The platform ships one, compiled against its own uv.lock (server-requirements.txt here); a project whose uv.lock
moves mlflow or boto3 away from it writes its own (`make mlflow-server-requirements`, into
infra/mlflow-server-requirements.txt), which `up` then takes instead.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from gpu_runner.mlflow_server.mlflow_server_project import REGENERATE, checked_requirements, locked_version

PYTHON_VERSION = "3.11"
# uv pip compile --python-platform: manylinux_2_34 x86_64, the wheels glibc 2.34 (AL2023) can load.
PLATFORM = "x86_64-manylinux_2_34"


def compile_command(uv: str, requirements_in: str, constraints: str, output: Path, header: str) -> list[str]:
    return [uv, "pip", "compile", requirements_in, "--constraint", constraints,
            "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM, "--only-binary", ":all:",
            "--generate-hashes", "--custom-compile-command", header, "--output-file", str(output),
            "--quiet"]  # fmt: skip


def export_command(uv: str, extras: list[str], output: Path) -> list[str]:
    """The lock's versions as constraints (run in the lock's own project directory)."""
    return [uv, "export", "--frozen", *[f"--extra={extra}" for extra in extras], "--no-hashes",
            "--no-emit-project", "--no-emit-workspace", "--no-header", "--quiet", "--output-file",
            str(output)]  # fmt: skip


def write_requirements(
    lock: Path, output: Path, *, extras: list[str], uv: str = "uv", header: str = REGENERATE
) -> str:
    """Compile the file for `lock`'s mlflow and boto3, check it as `up` will, and say what was written."""
    mlflow, boto3 = locked_version(lock, "mlflow"), locked_version(lock, "boto3")
    target = output.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "server.in").write_text(f"mlflow[auth]=={mlflow}\nboto3=={boto3}\n", encoding="utf-8")
        subprocess.run(
            export_command(uv, extras, work / "constraints.txt"), check=True, cwd=lock.resolve().parent
        )
        # Relative names from inside the scratch directory: the file's "# via" notes name no path of this machine.
        subprocess.run(
            compile_command(uv, "server.in", "constraints.txt", target, header), check=True, cwd=work
        )
    checked_requirements(output, mlflow, boto3)  # the check `up` makes, before anyone commits the file
    return f"wrote {output}: mlflow[auth]=={mlflow}, boto3=={boto3} and their closure, every wheel hashed"
