"""The promote / ci split on a real `mlflow server --app-name basic-auth` (artifacts proxied to moto's S3), with the
permissions the team server's boot script gives (the contract of issue 30: default READ; the training experiment
ci EDIT, promote READ; the served model and its promotions experiment ci READ, promote EDIT). The server's own
bootstrap is proven in the platform's platform/tests/runner/test_mlflow_server*.py; here: training and predict
work as `ci`, promote works as `promote` and needs nothing more, and `ci` cannot serve a model: not through the
command, not by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from gpu_job import registry
from mlflow.exceptions import MlflowException
from mlflow.server.auth.client import AuthServiceClient
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import cli, promote
from {{ cookiecutter.package_name }}.config import RegistryConfig

pytestmark = pytest.mark.slow

# The admin's is the session server's (conftest mlflow_auth_server), put in by the module fixture.
USERS = {"ci": "ci-password-for-tests", "promote": "promote-password-for-tests"}
MODEL, TRAINING = "auth-served", "auth-training"


@pytest.fixture(scope="module")
def auth_server(mlflow_auth_server: dict[str, str]) -> str:
    """The session's basic-auth server, with this module's users and the contract's permissions on them."""
    USERS["admin"] = mlflow_auth_server["password"]
    with pytest.MonkeyPatch.context() as patch:
        login(patch, "admin")
        _the_stacks_permissions(mlflow_auth_server["uri"])
    return mlflow_auth_server["uri"]


def _the_stacks_permissions(uri: str) -> None:
    """What the team server's boot script creates as admin (PLAN-issue30 contract)."""
    auth, client = AuthServiceClient(uri), MlflowClient(uri)
    for user in ("ci", "promote"):
        auth.create_user(user, USERS[user])
    training = client.create_experiment(TRAINING)
    promotions = client.create_experiment(promote.promotions_experiment(MODEL))
    client.create_registered_model(MODEL)
    # MLflow 3.17's per-user grants (AuthServiceClient.grant_user_permission; resource types of
    # mlflow/server/auth/permissions.py).
    for experiment, ci, promoter in ((training, "EDIT", "READ"), (promotions, "READ", "EDIT")):
        auth.grant_user_permission("ci", "experiment", experiment, ci)
        auth.grant_user_permission("promote", "experiment", experiment, promoter)
    auth.grant_user_permission("ci", "registered_model", MODEL, "READ")
    auth.grant_user_permission("promote", "registered_model", MODEL, "EDIT")


def login(patch: pytest.MonkeyPatch, user: str) -> None:
    patch.setenv("MLFLOW_TRACKING_USERNAME", user)
    patch.setenv("MLFLOW_TRACKING_PASSWORD", USERS[user])


def test_ci_trains_and_compares_only_promote_serves(
    auth_server: str,
    exports: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", auth_server)
    config = tmp_path / "train.yaml"
    config.write_text(f"registry:\n  model_name: {MODEL}\n", encoding="utf-8")
    client = MlflowClient(auth_server)

    # The training job, as ci: its run and exports, and its read-only comparison.
    login(monkeypatch, "ci")
    experiment = client.get_experiment_by_name(TRAINING).experiment_id
    run_id = client.create_run(experiment).info.run_id
    client.log_artifacts(run_id, str(exports), "exports")
    client.set_terminated(run_id)
    decision = registry.decide(client, RegistryConfig(model_name=MODEL), run_id, {"test_accuracy": 0.9})
    registry.log_decision(client, run_id, decision)
    assert decision.outcome == "candidate", decision

    # ci cannot serve it: not with the command promote.yml runs, not by hand.
    assert cli.main(["promote", f"--run-id={run_id}", f"--config={config}"]) == 1
    assert "the tracking server refused promote" in capsys.readouterr().err
    with pytest.raises(MlflowException, match="Permission denied"):
        client.create_model_version(MODEL, f"{client.get_run(run_id).info.artifact_uri}/exports", run_id)
    assert client.search_model_versions(f"name = '{MODEL}'") == []

    # promote.yml, as promote: it needs no more than the contract gives.
    login(monkeypatch, "promote")
    assert cli.main(["promote", f"--run-id={run_id}", f"--config={config}"]) == 0, capsys.readouterr().err
    served = client.get_model_version_by_alias(MODEL, "champion")
    assert served.tags[promote.CANDIDATE_TAG] == run_id

    # Back as ci: predict reads the served version; ci may not move its alias or write its files.
    login(monkeypatch, "ci")
    assert (
        cli.main(
            ["predict", "--check", "--model=champion", f"--config={config}", f"--output={tmp_path / 'out'}"]
        )
        == 0
    )
    with pytest.raises(MlflowException, match="Permission denied"):
        client.set_registered_model_alias(MODEL, "champion", str(served.version))
    # The artifact proxy answers a bare 403 (the artifact client raises requests' HTTPError, not MlflowException).
    with pytest.raises(requests.HTTPError, match="403 Client Error: Forbidden"):
        client.log_artifact(served.run_id, str(exports / "class_names.json"), "exports")
