"""Shared fixtures: a real moto server (S3 & co. over HTTP) and a real `mlflow server` whose artifacts live in it.

Both bind 127.0.0.1 on free ports and are stopped at the end of the session, also when a test fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import boto3
import pytest

# Before anything creates a boto3 client: no test may ever reach a real AWS account.
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
os.environ.update(FAKE_AWS)
for leaked in ("AWS_PROFILE", "MLFLOW_TRACKING_URI", "GITHUB_ACTIONS"):
    os.environ.pop(leaked, None)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ARTIFACT_BUCKET = "mlflow-artifacts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, process: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"{url} not up after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def start_process(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as handle:
        return subprocess.Popen(cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server in its own process; every boto3 client in the tests talks to it through AWS_ENDPOINT_URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    server = shutil.which("moto_server") or "moto_server"
    process = start_process([server, "-H", "127.0.0.1", "-p", str(port)], {**os.environ}, log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{endpoint}/moto-api/", process, log)
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        yield endpoint
    finally:
        os.environ.pop("AWS_ENDPOINT_URL", None)
        stop_process(process)


@pytest.fixture(scope="session")
def mlflow_server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real tracking server: sqlite backend, artifacts proxied to the moto S3 bucket."""
    boto3.client("s3").create_bucket(Bucket=ARTIFACT_BUCKET)
    workdir = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_S3_ENDPOINT_URL": moto_endpoint,
        # The job-execution workers cost ~2 GB of memory and are not needed for tracking.
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}",
        "--artifacts-destination", f"s3://{ARTIFACT_BUCKET}/mlartifacts",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    process = start_process(cmd, env, workdir / "server.log")
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{uri}/health", process, workdir / "server.log")
        yield uri
    finally:
        stop_process(process)


@pytest.fixture(scope="session")
def amazon_image(moto_endpoint: str) -> Callable[[str], str]:
    """moto's first Amazon-owned image in a region, asked once per region and worker process.

    DescribeImages(Owners=["amazon"]) answers with all 1,301 of moto 5.2.5's Amazon images: ~2.4 s of server CPU
    per call plus the client's parse of the XML (measured 2026-12-01), when it ran for every runner test it was
    the suite's largest cost. The list cannot change during a session: images the tests register or copy are
    owned by moto's account, not by "amazon".
    """

    @cache
    def first(region: str) -> str:
        ec2 = boto3.client("ec2", region_name=region)
        return ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]

    return first


@pytest.fixture
def artifact_bucket() -> str:
    """The moto S3 bucket that holds the MLflow server's artifacts."""
    return ARTIFACT_BUCKET


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory so outputs, checkpoints and local MLflow stores never touch the project."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
