"""The dev container (.devcontainer/): devcontainer.json against the Dev Container specification's published schema,
and the commands it runs, run here on this machine's Python: the post-create install (`make install`, `make
env-check`) and the start of Jupyter Lab and the MLflow UI on 127.0.0.1. There is no Docker engine here, so the
image itself is never pulled; the parity test (test_env_parity.py) ties its tag to the lock.

The schema: the Dev Container specification's base schema at a named commit, shipped by the platform
(gpu_runner_testing.dev_container, which says where it comes from).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from gpu_runner_testing import dev_container

PROJECT = Path(__file__).resolve().parent.parent
DEVCONTAINER = PROJECT / ".devcontainer"
SCHEMA = dev_container.SCHEMA


def _config() -> dict:
    return json.loads((DEVCONTAINER / "devcontainer.json").read_text())


def _errors(document: dict) -> list[str]:
    validator = jsonschema.Draft201909Validator(json.loads(SCHEMA.read_text()))
    return [error.message for error in validator.iter_errors(document)]


def test_devcontainer_json_validates_against_the_spec_schema() -> None:
    assert _errors(_config()) == []


def test_the_schema_refuses_what_the_spec_does_not_know() -> None:
    assert any("'imagee' was unexpected" in e for e in _errors({**_config(), "imagee": "x"}))
    assert _errors({**_config(), "forwardPorts": ["no port"]})


def _make_default(name: str) -> str:
    for line in (PROJECT / "Makefile").read_text().splitlines():
        if line.startswith(f"{name} ?= "):
            return line.split("?= ", 1)[1]
    raise AssertionError(f"the Makefile sets no {name}")


def test_the_container_forwards_the_two_ports_its_scripts_open() -> None:
    config = _config()
    assert config["forwardPorts"] == [int(_make_default("JUPYTER_PORT")), int(_make_default("MLFLOW_PORT"))]
    for key, script in (("postCreateCommand", "post-create.sh"), ("postStartCommand", "start-services.sh")):
        assert config[key] == f"bash .devcontainer/{script}"
        assert (DEVCONTAINER / script).is_file()
    assert (DEVCONTAINER / ".gitignore").read_text().split() == ["logs/"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # uv's check of the venv, then a fresh interpreter that imports TensorFlow
def test_post_create_installs_the_locked_environment_and_checks_it() -> None:
    """Run in the project itself: `make install` finds .venv in sync with uv.lock (what it is after `make
    install`), so it changes nothing. Not run here: the apt and pip branches (make, git and uv are installed)."""
    result = subprocess.run(
        ["bash", ".devcontainer/post-create.sh"], cwd=PROJECT, env={**os.environ, "UV_OFFLINE": "1"},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "| TensorFlow | 2.15.1 | 2.15.1 | ok |" in result.stdout, result.stdout


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[subprocess.CompletedProcess, dict[str, str], Path]]:
    """start-services.sh with free ports, its logs, the MLflow store and Jupyter's own files in tmp_path; both
    process groups are ended afterwards, also when the start fails."""
    ports = {"JUPYTER_PORT": str(_free_port()), "MLFLOW_PORT": str(_free_port())}
    logs = tmp_path / "logs"
    env = {
        **os.environ, **ports, "UV_OFFLINE": "1", "DEVCONTAINER_LOGS": str(logs),
        "MLFLOW_STORE": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"), "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
    }  # fmt: skip
    try:
        result = subprocess.run(
            ["bash", ".devcontainer/start-services.sh"], cwd=PROJECT, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        yield result, ports, logs
    finally:
        _signal(logs, signal.SIGTERM)
        time.sleep(1)
        _signal(logs, signal.SIGKILL)


def _signal(logs: Path, number: int) -> None:
    for pgid in logs.glob("*.pgid"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pgid.read_text()), number)


@pytest.mark.slow  # starts Jupyter Lab and an MLflow server
def test_start_services_brings_up_jupyter_and_mlflow_on_localhost(
    services: tuple[subprocess.CompletedProcess, dict[str, str], Path],
) -> None:
    result, ports, logs = services
    assert result.returncode == 0, result.stdout + result.stderr
    jupyter, mlflow = ports["JUPYTER_PORT"], ports["MLFLOW_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{jupyter}/api", timeout=10) as answer:
        assert "version" in json.loads(answer.read())
    with urllib.request.urlopen(f"http://127.0.0.1:{mlflow}/health", timeout=10) as answer:
        assert answer.read() == b"OK"
    assert f"http://127.0.0.1:{jupyter}/lab?token=" in (logs / "jupyter.log").read_text()
    assert f"jupyter: http://127.0.0.1:{jupyter}/" in result.stdout
    assert f"mlflow: http://127.0.0.1:{mlflow}/" in result.stdout
