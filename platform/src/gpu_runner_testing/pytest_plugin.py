"""The platform's shared test fixtures, as a pytest plugin: a real moto server (S3 & co. over HTTP), moto's AWS Batch
whose jobs run as local processes (batch_host.py), and real `mlflow server`s whose artifacts live in moto.

Every server binds 127.0.0.1 on a free port and is stopped at the end of the session, also when a test fails.
Load it from a root conftest.py with `pytest_plugins = ["gpu_runner_testing.pytest_plugin"]` (never an entry
point: importing this module sets fake AWS credentials and drops MLFLOW_TRACKING_URI for the whole process).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import boto3
import botocore.loaders
import botocore.session
import pytest

from gpu_runner_testing.amazon_images import first_amazon_image
from gpu_runner_testing.mlflow_server_boot import inherited_environment

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

# One parsed copy of botocore's service models per test process. botocore caches a loaded model on its Loader, and
# makes a Loader per Session (botocore/session.py, _register_data_loader); the tests make a Session per test, and
# the code under test one per command, so each re-read EC2's 4.4 MB model: ~0.3 s each, measured 2026-12-01.
# A process of the product makes one Session, so sharing the Loader is what the product itself does.
botocore.session.create_loader = cache(botocore.loaders.create_loader)

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


# Shared resources that take seconds to make in every test process (measured 2026-12-01 on this suite's 2
# cores). A test that needs one is in the slow tier, so `make test` makes none of them; CI's
# test-slow job runs them on every push. The local sqlite store still runs in the push tier (test_registry).
SLOW_FIXTURES = {
    "mlflow_server": "the MLflow tracking server: ~12 s until /health answers (it imports MLflow's whole web app)",
    "mlflow_auth_server": "the same with MLflow's basic auth (issue 30: the promote / ci split)",
    "stack": "the stack `gpu-runner bootstrap` deploys to moto: ~5 s, then each call checked against its policies",
    "doctor_stack": "the stack test_doctor deploys and wires as manual/setup.md says: ~5 s, then doctor's AWS calls",
}


def pytest_configure(config: pytest.Config) -> None:
    # The tier SLOW_FIXTURES puts a test in; a project's own pyproject may declare it too (pytest allows both).
    config.addinivalue_line("markers", "slow: needs a slow shared fixture or is slow itself (the slow tier)")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m filter, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@contextlib.contextmanager
def _tracking_uri_kept() -> Iterator[None]:
    """MLflow's tracking URI as it was before the block, after it. mlflow.set_tracking_uri (train.py and
    gpu_job.batch_tracking call it, as do tests and their fixtures) sets a module global, which outranks
    MLFLOW_TRACKING_URI, and the variable itself "so that subprocess can inherit it"
    (mlflow/tracking/_tracking_service/utils.py): one module's server then took another module's runs and models."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    global_before = getattr(utils, "_tracking_uri", None)
    try:
        yield
    finally:
        utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
        if utils is not None:
            utils._tracking_uri = global_before
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before


# Module-scoped too: autouse fixtures are set up before the other fixtures of their scope, so this one also undoes
# what a module's own fixtures (a training run, `trained` in test_registry.py) set.
@pytest.fixture(autouse=True, scope="module")
def _module_keeps_the_tracking_uri() -> Iterator[None]:
    with _tracking_uri_kept():
        yield


@pytest.fixture(autouse=True)
def _test_keeps_the_tracking_uri() -> Iterator[None]:
    with _tracking_uri_kept():
        yield


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server in its own process; every boto3 client in the tests talks to it through AWS_ENDPOINT_URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    # The moto of this interpreter's environment (the locked one; a pyenv shim's moto_server on PATH answered other
    # offerings), with conditional PutObject atomic as S3's (gpu_runner_testing/moto_server.py).
    command = [sys.executable, "-m", "gpu_runner_testing.moto_server", "-H", "127.0.0.1", "-p", str(port)]
    process = start_process(command, {**os.environ}, log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{endpoint}/moto-api/", process, log)
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        yield endpoint
    finally:
        os.environ.pop("AWS_ENDPOINT_URL", None)
        stop_process(process)


@pytest.fixture(scope="session")
def batch_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second moto server whose AWS Batch jobs really run, as local processes (gpu_runner_testing/batch_host.py). Its own
    process: the session's moto_endpoint has no container host, and the jobs' threads live in the server."""
    port = free_port()
    log = tmp_path_factory.mktemp("batch-host") / "moto.log"
    cmd = [sys.executable, "-m", "gpu_runner_testing.batch_host", "--port", str(port)]
    process = start_process(cmd, {**os.environ}, log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{endpoint}/moto-api/", process, log)
        yield endpoint
    finally:
        stop_process(process)


@pytest.fixture(scope="session")
def batch_world(batch_endpoint: str) -> str:
    """The batch host's endpoint, with the queues and job definitions of gpu_runner_testing/batch_world.py created once."""
    from gpu_runner_testing.batch_world import create

    create(batch_endpoint)
    return batch_endpoint


@pytest.fixture(scope="session")
def mlflow_server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real tracking server: sqlite backend, artifacts proxied to the moto S3 bucket."""
    boto3.client("s3").create_bucket(Bucket=ARTIFACT_BUCKET)
    workdir = tmp_path_factory.mktemp("mlflow-server")
    with _served_mlflow(workdir, moto_endpoint, f"s3://{ARTIFACT_BUCKET}/mlartifacts", [], {}) as uri:
        yield uri


@pytest.fixture(scope="session")
def mlflow_auth_server(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A real tracking server with MLflow's basic auth (`--app-name basic-auth`) and default permission READ (issue
    30's contract for the team server), artifacts proxied to its own moto bucket: {"uri", "admin", "password"}
    (the admin, who sets up the rest)."""
    workdir = tmp_path_factory.mktemp("mlflow-auth-server")
    bucket, admin = "mlflow-auth-artifacts", {"admin": "admin", "password": "admin-password-for-tests"}
    boto3.client("s3").create_bucket(Bucket=bucket)
    ini = workdir / "basic_auth.ini"
    ini.write_text(
        f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{workdir / 'auth.db'}\n"
        f"admin_username = {admin['admin']}\nadmin_password = {admin['password']}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    auth_env = {"MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_FLASK_SERVER_SECRET_KEY": "tests-only"}
    artifacts = f"s3://{bucket}/mlflow-artifacts"
    with _served_mlflow(workdir, moto_endpoint, artifacts, ["--app-name", "basic-auth"], auth_env) as uri:
        yield {"uri": uri, **admin}


@contextlib.contextmanager
def _served_mlflow(
    workdir: Path, moto_endpoint: str, artifacts: str, extra_args: list[str], extra_env: dict[str, str]
) -> Iterator[str]:
    """`mlflow server` on a free loopback port with a sqlite store in `workdir`, artifacts proxied to `artifacts`
    in moto; its URI until the block ends."""
    env = inherited_environment(
        {
            "MLFLOW_S3_ENDPOINT_URL": moto_endpoint,
            # The job-execution workers cost ~2 GB of memory and are not needed for tracking.
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            **extra_env,
        }
    )
    port = free_port()
    cmd = [
        sys.executable, "-m", "mlflow", "server", *extra_args,
        "--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}",
        "--artifacts-destination", artifacts,
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
    """An Amazon-owned image of moto's in a region (gpu_runner_testing/amazon_images.py), asked once per region and process.

    When every runner test asked moto for all 1,301 Amazon images it was the suite's largest cost. The list cannot
    change during a session: images the tests register or copy are owned by moto's account, not by "amazon".
    """

    @cache
    def first(region: str) -> str:
        ec2 = boto3.client("ec2", region_name=region)
        return first_amazon_image(ec2)

    return first


@pytest.fixture
def artifact_bucket() -> str:
    """The moto S3 bucket that holds the MLflow server's artifacts."""
    return ARTIFACT_BUCKET
