"""infra/mlflow-server-requirements.txt, what the team MLflow server's first boot installs with pip's
--require-hashes: every requirement pinned with its sha256, mlflow and boto3 at uv.lock's versions. `make
mlflow-server-requirements` rewrites it (scripts/mlflow_server_requirements.py, needs PyPI); this test fails until
it is rewritten after uv.lock moves mlflow or boto3, and `up` refuses a file that fails the same check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doubles.mlflow_server_stack import LOCK, REQUIREMENTS

from gpu_runner.mlflow_server.mlflow_server_project import (
    checked_requirements,
    locked_version,
    requirement_lines,
)
from gpu_runner.mlflow_server.mlflow_wake import MlflowServerError

MLFLOW, BOTO3 = locked_version(LOCK, "mlflow"), locked_version(LOCK, "boto3")


def test_the_committed_file_is_the_hashed_closure_of_uv_locks_mlflow() -> None:
    checked = checked_requirements(REQUIREMENTS, MLFLOW, BOTO3)
    names = {
        line.split("==", 1)[0].split("[", 1)[0].lower()
        for _, line in requirement_lines(checked.body.decode())
    }
    # The closure, not the two names: the basic-auth app's Flask-WTF ([auth]), boto3's botocore, MLflow's own
    # server (uvicorn, sqlalchemy).
    assert {"mlflow", "boto3", "flask-wtf", "botocore", "mlflow-skinny", "sqlalchemy", "uvicorn"} <= names


def _copy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_behind_uv_lock_is_refused_with_the_command_that_fixes_it(tmp_path: Path) -> None:
    text = REQUIREMENTS.read_text(encoding="utf-8")
    older = _copy(tmp_path, text.replace(f"\nmlflow=={MLFLOW} ", "\nmlflow==3.0.0 ", 1))
    assert older.read_text() != text
    with pytest.raises(MlflowServerError) as refused:
        checked_requirements(older, MLFLOW, BOTO3)
    assert f"mlflow is 3.0.0 there, {MLFLOW} in uv.lock" in str(refused.value)
    assert "run `make mlflow-server-requirements`" in str(refused.value)


def test_a_requirement_without_a_hash_is_refused_naming_its_line(tmp_path: Path) -> None:
    lines = REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("boto3=="))
    # boto3's own line without its hashes: `boto3==x.y.z` alone, its --hash lines gone.
    end = next(i for i in range(first + 1, len(lines)) if not lines[i].lstrip().startswith("--hash"))
    unhashed = _copy(tmp_path, "\n".join([*lines[:first], f"boto3=={BOTO3}", *lines[end:]]) + "\n")
    with pytest.raises(
        MlflowServerError,
        match=rf"line {first + 1}: 'boto3=={re.escape(BOTO3)}' is not name==version with --hash",
    ):
        checked_requirements(unhashed, MLFLOW, BOTO3)
    loose = _copy(tmp_path, REQUIREMENTS.read_text(encoding="utf-8") + "requests>=2\n")
    with pytest.raises(MlflowServerError, match="'requests>=2' is not name==version with --hash"):
        checked_requirements(loose, MLFLOW, BOTO3)


def test_a_missing_file_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(MlflowServerError, match=r"not found: run `make mlflow-server-requirements`"):
        checked_requirements(tmp_path / "absent.txt", MLFLOW, BOTO3)
