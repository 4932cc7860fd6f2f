"""The MLflow REST client: credentials sent as MLflow's own clients send them, and no client without an http(s)
tracking server."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest
from doubles.local_http import LocalHttpServer

from gpu_runner.mlflow_rest import MlflowRest


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
