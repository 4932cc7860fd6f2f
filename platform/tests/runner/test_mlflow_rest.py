"""The MLflow REST client: credentials sent as MLflow's own clients send them, no client without an http(s)
tracking server, and the champion look-up against a real server with basic auth, as the team server runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest
from mlflow.server.auth.client import AuthServiceClient
from mlflow.tracking import MlflowClient

from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest
from gpu_runner_testing.local_http import LocalHttpServer
from gpu_runner_testing.mlflow_server_boot import free_port


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers))
        body = json.dumps({"run": {"info": {"run_id": "r"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"MLFLOW_TRACKING_USERNAME": "ada", "MLFLOW_TRACKING_PASSWORD": "s3cret"}, "Basic YWRhOnMzY3JldA=="),
        ({"MLFLOW_TRACKING_TOKEN": "tok-123"}, "Bearer tok-123"),
        ({}, None),
    ],
)
def test_mlflow_credentials_as_mlflow_sends_them(env: dict[str, str], expected: str | None) -> None:
    _Recorder.seen = []
    with LocalHttpServer(_Recorder) as server:
        client = MlflowRest.from_env({"MLFLOW_TRACKING_URI": server.url, **env})
        assert client is not None
        assert client.get_run("r") == {"info": {"run_id": "r"}}
    assert _Recorder.seen[0].get("Authorization") == expected


@pytest.mark.parametrize("uri", ["", "file:///tmp/mlruns", "sqlite:///mlflow.db", "databricks"])
def test_no_http_tracking_server_means_no_client(uri: str) -> None:
    assert MlflowRest.from_env({"MLFLOW_TRACKING_URI": uri}) is None


ADMIN, CI = ("admin", "admin-password-for-tests"), ("ci", "ci-password-for-tests")


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mlflow server --app-name basic-auth` with the team server's default permission (READ) and a ci user."""
    workdir = tmp_path_factory.mktemp("auth-server")
    ini = workdir / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{workdir / 'auth.db'}\nadmin_username = {ADMIN[0]}\n"
        f"admin_password = {ADMIN[1]}\nauthorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port = free_port()
    env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
           "MLFLOW_FLASK_SERVER_SECRET_KEY": "tests-only"}  # fmt: skip
    cmd = [sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth", "--backend-store-uri",
           f"sqlite:///{workdir / 'mlflow.db'}", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # fmt: skip
    with (workdir / "server.log").open("w") as log:
        process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=2).close()
                break
            except (urllib.error.URLError, OSError):
                assert process.poll() is None and time.monotonic() < deadline, (
                    workdir / "server.log"
                ).read_text()
                time.sleep(0.5)
        os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = ADMIN
        try:
            AuthServiceClient(uri).create_user(*CI)
            MlflowClient(uri).create_registered_model("exists")
        finally:
            del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
        yield uri
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ci_client(uri: str) -> MlflowRest:
    client = MlflowRest.from_env({"MLFLOW_TRACKING_URI": uri, "MLFLOW_TRACKING_USERNAME": CI[0],
                                  "MLFLOW_TRACKING_PASSWORD": CI[1]})  # fmt: skip
    assert client is not None
    return client


def test_no_champion_behind_basic_auth_is_none_not_a_refusal(auth_server: str) -> None:
    """The first run of a project: no registered model yet. The ci user's alias look-up alone is refused
    (403), which would fail the pull-request comment; asking for the model first gives MLflow's 404."""
    client = _ci_client(auth_server)
    with pytest.raises(MlflowError) as refused:
        client._call("GET", "registered-models/alias", params={"name": "missing", "alias": "champion"})
    assert refused.value.status == 403
    assert client.model_version_by_alias("missing", "champion") is None
    # A model with no version holding the alias, and a wrong password, which stays an error.
    assert client.model_version_by_alias("exists", "champion") is None
    wrong = MlflowRest.from_env({"MLFLOW_TRACKING_URI": auth_server, "MLFLOW_TRACKING_USERNAME": CI[0],
                                 "MLFLOW_TRACKING_PASSWORD": "wrong"})  # fmt: skip
    assert wrong is not None
    with pytest.raises(MlflowError) as denied:
        wrong.model_version_by_alias("exists", "champion")
    assert denied.value.status == 401
