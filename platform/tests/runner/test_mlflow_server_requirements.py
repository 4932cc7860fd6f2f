"""The MLflow server's requirements, what its first boot installs with pip's --require-hashes: every requirement
pinned with its sha256, mlflow and boto3 at the lock's versions. The platform ships one
(gpu_runner/mlflow_server/server-requirements.txt) compiled against its own uv.lock, whose versions the template
repository's scripts/relock.py keeps equal to a new project's; this test fails until it is compiled again after
that lock moves mlflow or boto3 (`make server-requirements` in the template repository, needs PyPI). A project that
moves them itself writes its own (`make mlflow-server-requirements`), which `up` then takes; `up` refuses a file
that fails the same check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow_server_stack import LOCK, REQUIREMENTS

from gpu_runner import cli
from gpu_runner.mlflow_server.mlflow_server_project import (
    DEFAULT_REQUIREMENTS,
    PLATFORM_REQUIREMENTS,
    checked_requirements,
    locked_version,
    requirement_lines,
    requirements_file,
)
from gpu_runner.mlflow_server.mlflow_wake import MlflowServerError
from gpu_runner.mlflow_server.server_requirements import compile_command, export_command

MLFLOW, BOTO3 = locked_version(LOCK, "mlflow"), locked_version(LOCK, "boto3")


def test_the_shipped_file_is_the_hashed_closure_of_the_platform_locks_mlflow() -> None:
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


def test_up_takes_the_projects_own_file_when_it_has_one_else_the_platforms(tmp_path: Path) -> None:
    assert requirements_file(None, tmp_path) == PLATFORM_REQUIREMENTS and PLATFORM_REQUIREMENTS.is_file()
    own = tmp_path / DEFAULT_REQUIREMENTS
    own.parent.mkdir()
    own.write_text(REQUIREMENTS.read_text(encoding="utf-8"), encoding="utf-8")
    assert requirements_file(None, tmp_path) == own
    given = tmp_path / "elsewhere.txt"
    assert requirements_file(given, tmp_path) == given  # a flag wins, even over a file that exists


def test_the_compile_commands_bind_the_servers_platform_and_the_locks_versions(tmp_path: Path) -> None:
    """What `mlflow-server requirements` runs (it needs PyPI, so it runs here only as its command lines): uv's
    export of the lock's versions as constraints, and pip compile for CPython 3.11 on AL2023, wheels only, hashed."""
    export = export_command("uv", ["cpu"], tmp_path / "constraints.txt")
    assert export[:3] == ["uv", "export", "--frozen"] and "--extra=cpu" in export and "--no-hashes" in export
    compiled = compile_command("uv", "server.in", "constraints.txt", tmp_path / "out.txt", "make x")
    valued = (
        "--constraint",
        "--python-version",
        "--python-platform",
        "--only-binary",
        "--custom-compile-command",
    )
    flags = {flag: compiled[compiled.index(flag) + 1] for flag in valued}
    assert compiled[:4] == ["uv", "pip", "compile", "server.in"]
    assert (flags["--constraint"], flags["--python-version"], flags["--python-platform"]) == (
        "constraints.txt",
        "3.11",
        "x86_64-manylinux_2_34",
    )
    assert flags["--only-binary"] == ":all:" and "--generate-hashes" in compiled
    assert flags["--custom-compile-command"] == "make x"


def test_the_command_names_a_missing_lock_or_uv_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "requirements.txt"
    argv = ["mlflow-server", "requirements", "--output", str(output)]
    assert cli.main([*argv, "--lock", str(tmp_path / "uv.lock")]) == 1
    assert f"--lock: {tmp_path / 'uv.lock'} not found" in capsys.readouterr().err
    lock = tmp_path / "uv.lock"
    lock.write_text(LOCK.read_text(encoding="utf-8"), encoding="utf-8")
    assert cli.main([*argv, "--lock", str(lock), "--uv", str(tmp_path / "no-uv")]) == 1
    assert "--uv names the uv command" in capsys.readouterr().err
    assert not output.exists()
