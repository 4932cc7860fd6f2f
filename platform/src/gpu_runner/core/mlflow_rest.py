"""The MLflow tracking REST calls gpu-runner makes: teardown's (runs/get, metrics/get-history, runs/log-batch),
doctor's (experiments/search), `batch open-run`'s (experiments/get-by-name, experiments/create, runs/create),
the cost report's (experiments/get-by-name, runs/search, metrics/get-history) and
the pull-request comment's (runs/get, metrics/get-history, registered-models/alias).

Plain `requests`, not the mlflow package: gpu-runner stays light enough to install in seconds on the CPU runner.
Authentication as MLflow's own clients do it: MLFLOW_TRACKING_USERNAME/PASSWORD (basic), else
MLFLOW_TRACKING_TOKEN (bearer); MLFLOW_TRACKING_INSECURE_TLS and MLFLOW_TRACKING_SERVER_CERT_PATH for TLS.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

TIMEOUT = (5.0, 30.0)  # connect, read (seconds)


class MlflowError(Exception):
    """The tracking server could not be reached or refused the request (the message says which)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of a refusal, None when the server was not reached


class MlflowRest:
    def __init__(self, uri: str, session: requests.Session | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.session = session or requests.Session()
        # Brief hiccups only (connection refused, 429/5xx): the cost record is not worth a long wait.
        retry = Retry(
            total=2,
            connect=2,
            read=0,
            status=2,
            backoff_factor=0.5,
            status_forcelist=(429, 502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=False,
        )
        adapter = HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MlflowRest | None:
        """None when MLFLOW_TRACKING_URI is unset or not an http(s) server (a local store dies with the job)."""
        uri = env.get("MLFLOW_TRACKING_URI", "")
        if not uri.startswith(("http://", "https://")):
            return None
        session = requests.Session()
        username, password = env.get("MLFLOW_TRACKING_USERNAME"), env.get("MLFLOW_TRACKING_PASSWORD")
        token = env.get("MLFLOW_TRACKING_TOKEN")
        if username and password:
            session.auth = (username, password)
        elif token:
            session.headers["Authorization"] = f"Bearer {token}"
        if env.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
            session.verify = False
        elif env.get("MLFLOW_TRACKING_SERVER_CERT_PATH"):
            session.verify = env["MLFLOW_TRACKING_SERVER_CERT_PATH"]
        return cls(uri, session)

    def _call(self, method: str, endpoint: str, **kwargs: Any) -> dict[str, Any]:
        url = f"{self.uri}/api/2.0/mlflow/{endpoint}"
        try:
            response = self.session.request(method, url, timeout=TIMEOUT, **kwargs)
        except requests.RequestException as error:
            raise MlflowError(f"{self.uri} unreachable ({type(error).__name__}: {error})") from None
        if response.status_code != 200:
            try:
                body = response.json()
                detail = f"{body.get('error_code', '')}: {body.get('message', '')}"
            except ValueError:
                detail = response.text[:200]
            raise MlflowError(
                f"{method} {endpoint} answered HTTP {response.status_code} ({detail})", response.status_code
            )
        try:
            return response.json()
        except ValueError:
            raise MlflowError(
                f"{method} {endpoint}: not a JSON answer (is {self.uri} an MLflow server?)"
            ) from None

    def get_run(self, run_id: str) -> dict[str, Any]:
        return self._call("GET", "runs/get", params={"run_id": run_id}).get("run", {})

    def metric_history(self, run_id: str, key: str) -> list[dict[str, Any]]:
        points: list[dict[str, Any]] = []
        params = {"run_id": run_id, "metric_key": key}
        while True:
            page = self._call("GET", "metrics/get-history", params=params)
            points += page.get("metrics", [])
            token = page.get("next_page_token")
            if not token:
                return points
            params = {**params, "page_token": token}

    def log_batch(
        self, run_id: str, metrics: Mapping[str, float], tags: Mapping[str, str], *, step: int
    ) -> None:
        now = int(time.time() * 1000)
        body = {
            "run_id": run_id,
            "metrics": [
                {"key": key, "value": value, "timestamp": now, "step": step} for key, value in metrics.items()
            ],
            "tags": [{"key": key, "value": value} for key, value in tags.items()],
        }
        self._call("POST", "runs/log-batch", json=body)

    def model_version_by_alias(self, name: str, alias: str) -> dict[str, Any] | None:
        """The version of registered model `name` that holds `alias`, None when there is none.

        The model is asked for first: behind MLflow's basic auth, a user who is not an admin gets 403 "Permission
        denied" for the alias of a model that does not exist (MLflow 3.17.2, mlflow/server/auth: the alias route
        authorizes against the registered model and refuses when there is none), where GET registered-models/get
        falls back to the default permission and answers 404 RESOURCE_DOES_NOT_EXIST (seen against a real
        server: tests/runner/test_mlflow_rest.py). An alias no version holds is INVALID_PARAMETER_VALUE (400)."""
        try:
            self._call("GET", "registered-models/get", params={"name": name})
            reply = self._call("GET", "registered-models/alias", params={"name": name, "alias": alias})
        except MlflowError as error:
            if error.status in (400, 404):
                return None
            raise
        return reply.get("model_version") or None

    def search_experiments(self, max_results: int = 1) -> list[dict[str, Any]]:
        """A cheap authenticated read (`gpu-runner doctor` asks it to see that the server answers)."""
        return self._call("GET", "experiments/search", params={"max_results": max_results}).get(
            "experiments", []
        )

    def experiment_id(self, name: str) -> str | None:
        """The id of the experiment named `name`, None when there is none (MLflow answers 404)."""
        try:
            reply = self._call("GET", "experiments/get-by-name", params={"experiment_name": name})
        except MlflowError as error:
            if error.status == 404:
                return None
            raise
        return str(reply.get("experiment", {}).get("experiment_id", "")) or None

    def open_run(self, experiment_name: str, tags: Mapping[str, str]) -> str:
        """A new run in the experiment named `experiment_name` (created when there is none); returns its id.

        MLflow answers experiments/create for a name that exists with RESOURCE_ALREADY_EXISTS (HTTP 400): another
        job created it since the lookup, so it is looked up again."""
        experiment = self.experiment_id(experiment_name)
        if experiment is None:
            try:
                reply = self._call("POST", "experiments/create", json={"name": experiment_name})
                experiment = str(reply.get("experiment_id", ""))
            except MlflowError as error:
                if error.status != 400:
                    raise
                experiment = self.experiment_id(experiment_name)
        if not experiment:
            raise MlflowError(f"experiment {experiment_name!r} could be neither found nor created")
        body = {
            "experiment_id": experiment,
            "start_time": int(time.time() * 1000),
            "tags": [{"key": key, "value": value} for key, value in tags.items()],
        }
        return str(self._call("POST", "runs/create", json=body)["run"]["info"]["run_id"])

    def search_runs(self, experiment_ids: list[str], filter_string: str) -> list[dict[str, Any]]:
        """Every active run of the experiments that matches the filter, all pages."""
        runs: list[dict[str, Any]] = []
        body: dict[str, Any] = {
            "experiment_ids": experiment_ids,
            "filter": filter_string,
            "run_view_type": "ACTIVE_ONLY",
            "max_results": 1000,
        }
        while True:
            page = self._call("POST", "runs/search", json=body)
            runs += page.get("runs", [])
            token = page.get("next_page_token")
            if not token:
                return runs
            body = {**body, "page_token": token}
