"""`make mlflow-server-requirements`: write infra/mlflow-server-requirements.txt, what the team MLflow server's
first boot installs with `pip install --require-hashes --only-binary=:all:` (gpu_runner/mlflow_server/mlflow-server.yaml).

mlflow[auth] and boto3 at the versions uv.lock pins, with their whole dependency closure, every other package held
to uv.lock's version too where the lock has it (`uv export` as constraints: the server runs what the tests ran),
resolved by `uv pip compile` for the server's platform: CPython 3.11 on Amazon Linux 2023 x86_64, whose glibc 2.34
takes manylinux_2_34 wheels (AL2023 User Guide, "Amazon Linux 2023 core packages": glibc 2.34). Every wheel of each
pinned version gets its sha256 (uv's --generate-hashes). Needs PyPI; run it after uv.lock changes mlflow or boto3
(tests/runner/test_mlflow_server_requirements.py fails until you do), and commit the file.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu_runner.mlflow_server.mlflow_server_project import (
    DEFAULT_REQUIREMENTS,
    REGENERATE,
    checked_requirements,
    locked_version,
)

PYTHON_VERSION = "3.11"
# uv pip compile --python-platform: manylinux_2_34 x86_64, the wheels glibc 2.34 (AL2023) can load.
PLATFORM = "x86_64-manylinux_2_34"


def compile_command(requirements_in: str, constraints: str, output: Path) -> list[str]:
    return ["uv", "pip", "compile", requirements_in, "--constraint", constraints,
            "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM, "--only-binary", ":all:",
            "--generate-hashes", "--custom-compile-command", REGENERATE, "--output-file", str(output),
            "--quiet"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=Path("uv.lock"))
    parser.add_argument("--output", type=Path, default=DEFAULT_REQUIREMENTS)
    args = parser.parse_args(argv)
    mlflow, boto3 = locked_version(args.lock, "mlflow"), locked_version(args.lock, "boto3")
    output = args.output.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "server.in").write_text(f"mlflow[auth]=={mlflow}\nboto3=={boto3}\n", encoding="utf-8")
        subprocess.run(
            ["uv", "export", "--frozen", "--extra", "cpu", "--no-hashes", "--no-emit-project",
             "--no-emit-workspace", "--no-header", "--quiet", "--output-file", str(work / "constraints.txt")],
            check=True,
        )  # fmt: skip
        # Relative names from inside the scratch directory: the file's "# via" notes name no path of this machine.
        subprocess.run(compile_command("server.in", "constraints.txt", output), check=True, cwd=work)
    checked_requirements(args.output, mlflow, boto3)  # the check `up` makes, before anyone commits the file
    print(
        f"wrote {args.output}: mlflow[auth]=={mlflow}, boto3=={boto3} and their closure, every wheel hashed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
