"""What training code may write to the bucket (issue 30, High 2): the runner role (GPU instances) and the Batch job
role (AWS Batch jobs) write their checkpoints under a prefix IAM binds to the caller's own session, and the studies
(append-only), nothing else; a resume restores only what its own branch's instances wrote.

The IAM evaluator (gpu_runner_testing.iam_requests) against the DEPLOYED stacks' policies, call by call and prefix by prefix,
with the request context AWS builds for each caller: `aws:userid` is `<role id>:<EC2 instance id>` for a role
assigned to an instance and `<role id>:<session name>` for an assumed role (IAM User Guide, "IAM policy elements:
Variables and tags", "Principal key values"; an ECS task role's session name is the task id, see
gpu_job.checkpoints)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpu_job import checkpoints
from gpu_runner.core import checkpoint_owners
from gpu_runner.mlflow_server import TEMPLATE as SERVER_TEMPLATE
from gpu_runner_testing import batch_stack as batch_double
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    as_caller,
    assumed_session,
    authorizations,
    instance_session,
    managed_policies,
    runner_role_name,
    stack_vpc,
)
from gpu_runner_testing.iam_requests import ACCOUNT, Request, allowed, record_calls, s3_context

INSTANCE = "i-0aaaaaaaaaaaaaaaa"
OTHER_INSTANCE = "i-0bbbbbbbbbbbbbbbb"
TASK = "a" * 32  # an ECS task id (the session name of a Batch job's role)
OTHER_TASK = "b" * 32
COMMIT = "c" * 40


@pytest.fixture(scope="module")
def job_stack(
    stack: dict[str, Any], settings_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """`make batch-up` after the session's `make bootstrap` (the job role's policy as deployed)."""
    settings = batch_double.batch_settings(settings_file, tmp_path_factory.mktemp("batch"))
    return batch_double.deployed(
        stack, settings, "--service-role-arn", batch_double.service_role(stack["session"])
    )


def _role(session: Any, name: str) -> dict[str, Any]:
    return session.client("iam").get_role(RoleName=name)["Role"]


def _callers(stack: dict[str, Any], job_stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each training role: its deployed policies, and the request context of one of its sessions and of another."""
    session = stack["session"]
    runner = _role(session, runner_role_name(stack))
    job = _role(session, job_stack["outputs"]["JobRoleArn"].rsplit("/", 1)[-1])

    vpc = stack_vpc(stack)

    def instance(role_id: str, instance_id: str) -> dict[str, str]:
        """On the instance, through the stack VPC's S3 endpoint (test_bucket_policy.py: from elsewhere, refused)."""
        arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"
        return {"aws:userid": f"{role_id}:{instance_id}", "ec2:SourceInstanceARN": arn,
                "aws:Ec2InstanceSourceVpc": vpc, "aws:SourceVpc": vpc}  # fmt: skip

    return {
        "runner": {
            "policies": managed_policies(session, runner["RoleName"]),
            "own": instance(runner["RoleId"], INSTANCE),
            "other": f"{runner['RoleId']}:{OTHER_INSTANCE}",
        },
        "job": {
            "policies": managed_policies(session, job["RoleName"]),
            "own": {"aws:userid": f"{job['RoleId']}:{TASK}"},
            "other": f"{job['RoleId']}:{OTHER_TASK}",
        },
    }


def _object(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


@pytest.mark.parametrize("role", ["runner", "job"])
def test_training_roles_write_only_their_own_checkpoints_and_the_studies(
    role: str, stack: dict[str, Any], job_stack: dict[str, Any]
) -> None:
    """Every prefix of the bucket, PutObject and DeleteObject, as the training role's session: only
    checkpoints/<its own aws:userid>/ and (create-only) sweeps/; reading stays open."""
    caller = _callers(stack, job_stack)[role]
    policies, own, bucket = caller["policies"], caller["own"], stack["bucket"]
    me = own["aws:userid"]
    refused = {
        "the served model's files": "mlflow-artifacts/1/0123456789abcdef/artifacts/exports/model.tflite",
        "an export": "exports/saved_model/saved_model.pb",
        "the shared data": "data/digits/0/0001.png",
        "the held-out set": "holdout/digits/0/0001.png",
        "a batch prediction": "predictions/nightly/shard-00000.parquet",
        "a Batch job's code": f"batch-src/{'a' * 40}/{'b' * 64}.tar.gz",
        "the runner mirror": "runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz",
        "the reaper's package": f"gpu-runner/reaper-lambda/{'d' * 64}.zip",
        "another session's checkpoint": f"checkpoints/{caller['other']}/train-x/{COMMIT[:12]}-abc/state.json",
        "a checkpoint of the old shared layout": f"checkpoints/train-x/{COMMIT[:12]}-abc/state.json",
        "a session id that only starts like its own": f"checkpoints/{me}0/train-x/state.json",
        "the record of which sessions a branch owns": f"checkpoints/owners/train%2Fx/{COMMIT}/{INSTANCE}",
        "the bucket's root": "state.json",
    }
    denied = []
    for what, key in refused.items():
        for action in ("s3:PutObject", "s3:DeleteObject"):
            for extra in ({}, {"s3:if-none-match": "*"}):
                request = Request(action, _object(bucket, key), {**s3_context(), **own, **extra})
                if allowed(policies, request):
                    denied.append(f"{role} may {action} {what} ({key})")
        assert allowed(policies, Request("s3:GetObject", _object(bucket, key), {**s3_context(), **own})), what
    assert denied == [], "\n".join(denied)

    mine = f"checkpoints/{me}/train-x/{COMMIT[:12]}-abc/files/chief/ckpt-1.index"
    for action in ("s3:PutObject", "s3:DeleteObject"):
        assert allowed(policies, Request(action, _object(bucket, mine), {**s3_context(), **own})), action
    journal = _object(bucket, "sweeps/study/journal/0001.jsonl")
    assert allowed(
        policies, Request("s3:PutObject", journal, {**s3_context(), **own, "s3:if-none-match": "*"})
    )
    assert not allowed(policies, Request("s3:PutObject", journal, {**s3_context(), **own}))
    # A session whose aws:userid cannot be resolved (no such key in the request) writes no checkpoint at all.
    nobody = {k: v for k, v in own.items() if k != "aws:userid"}
    assert not allowed(policies, Request("s3:PutObject", _object(bucket, mine), {**s3_context(), **nobody}))


# --- the evaluator's policy variables in Resource (gpu_runner_testing.iam_requests), against the IAM User Guide ------------


def _home(resource: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:PutObject", "Resource": resource}],
    }


def test_evaluator_resolves_policy_variables_in_resource() -> None:
    """ "You can use policy variables in the Resource element" ("IAM policy elements: Variables and tags"): each
    request matches the Resource with its own value substituted, and only that value."""
    policy = _home("arn:aws:s3:::b/checkpoints/${aws:userid}/*")
    me = {"aws:userid": "AROAEXAMPLE:i-0aaaaaaaaaaaaaaaa"}
    assert allowed(
        [policy], Request("s3:PutObject", "arn:aws:s3:::b/checkpoints/AROAEXAMPLE:i-0aaaaaaaaaaaaaaaa/x", me)
    )
    for key in ("checkpoints/AROAEXAMPLE:i-0bbbbbbbbbbbbbbbb/x", "checkpoints/AROAEXAMPLE:i-0aaaaaaaaaaaaaaaa0/x",
                "checkpoints/x", "checkpoints/${aws:userid}/x"):  # fmt: skip
        assert not allowed([policy], Request("s3:PutObject", f"arn:aws:s3:::b/{key}", me)), key


def test_evaluator_resource_variable_without_a_value_matches_nothing() -> None:
    """ "If a variable that has no value in the authorization context is used as part of the Resource ... the
    resource that includes a policy variable with no value will not match any resource" (same page)."""
    policy = _home("arn:aws:s3:::b/checkpoints/${aws:userid}/*")
    assert not allowed([policy], Request("s3:PutObject", "arn:aws:s3:::b/checkpoints/anything/x", {}))


def test_evaluator_substitutes_values_as_literals_and_the_special_variables() -> None:
    """A substituted value is data: a `*` in it matches only `*`; "${*}" is a literal asterisk (same page,
    "Special characters"); a variable before the ARN's resource portion is refused as a policy error."""
    policy = _home("arn:aws:s3:::b/home/${aws:userid}/*")
    star = {"aws:userid": "AROAEXAMPLE:*"}
    assert allowed([policy], Request("s3:PutObject", "arn:aws:s3:::b/home/AROAEXAMPLE:*/x", star))
    assert not allowed([policy], Request("s3:PutObject", "arn:aws:s3:::b/home/AROAEXAMPLE:i-0aaa/x", star))
    literal = _home("arn:aws:s3:::b/${*}/x")
    assert allowed([literal], Request("s3:PutObject", "arn:aws:s3:::b/*/x"))
    assert not allowed([literal], Request("s3:PutObject", "arn:aws:s3:::b/y/x"))
    with pytest.raises(ValueError, match="resource portion"):
        allowed([_home("arn:aws:s3:${aws:userid}::b/x")], Request("s3:PutObject", "arn:aws:s3:::b/x", star))


# --- a resume restores its own branch's predecessors, never another branch's (moto sessions, the real code) -------


@pytest.fixture
def runner_role(moto_endpoint: str) -> str:
    """A role standing for the runner role: each test session of it is named after an instance, as EC2 names the
    instance role's sessions (aws:userid "<role id>:<instance id>")."""
    iam = boto3.client("iam", region_name=REGION)
    name = f"runner-{uuid.uuid4().hex[:8]}"
    return iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17",
                           "Statement": []}))["Role"]["Arn"]  # fmt: skip


def _as_instance(monkeypatch: pytest.MonkeyPatch, role_arn: str, instance_id: str, branch: str) -> None:
    """This process now is training code on `instance_id`, in a run of `branch` (what train.yml's train step sets:
    the branch, the commit; the instance profile's credentials)."""
    credentials = assumed_session(role_arn, instance_id).get_credentials()
    # A new process on each instance: boto3's default session (which keeps the first credentials it resolved) too.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", credentials.token)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_REF_NAME", branch)
    monkeypatch.setenv("TRAIN_COMMIT", COMMIT)


def _train_on(tmp_path: Path, name: str, bucket: str) -> Any:
    """The checkpoint store as a project's training opens it (its train._checkpoint_store; the project's
    test_checkpoints holds it to this): the branch and commit its run is tagged with, from the job's environment,
    which code inside the job sets as it likes."""
    return checkpoints.open_store(
        f"s3://{bucket}/checkpoints", os.environ["GITHUB_REF_NAME"], os.environ["TRAIN_COMMIT"],
        checkpoints.config_hash({"epochs": 2}), tmp_path / name,
    )  # fmt: skip


def _checkpoint(store: Any, content: str, run_id: str, epochs: int) -> None:
    (store.local_dir / "chief").mkdir(parents=True, exist_ok=True)
    (store.local_dir / "chief" / "ckpt-1.index").write_text(content)
    store.push({"run_id": run_id, "epochs_done": epochs})


def test_a_resume_restores_its_branchs_last_attempt_and_never_another_branchs(
    runner_role: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: a train branch's code (instance X) writes a checkpoint, newer than the victim's, with the victim's
    branch, commit and config wherever it may write. The victim's next attempt (instance Y2, after a spot
    interruption on Y1) must restore Y1's checkpoint, in Y1's run, and never X's."""
    bucket = f"resume-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    y1, y2, x = "i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2", "i-0bbbbbbbbbbbbbbbb"
    # What the default branch's launch records for each instance (gpu-runner launch, the train role).
    for branch, session in (("train/victim", y1), ("train/attacker", x), ("train/victim", y2)):
        assert checkpoint_owners.record(s3, bucket, branch=branch, commit=COMMIT, session=session)

    _as_instance(monkeypatch, runner_role, y1, "train/victim")
    _checkpoint(_train_on(tmp_path, "y1", bucket), "honest weights", "victims-run", 2)
    # The attacker's code claims the victim's branch (it sets its own environment) and writes later.
    _as_instance(monkeypatch, runner_role, x, "train/victim")
    _checkpoint(_train_on(tmp_path, "x", bucket), "poisoned weights", "attackers-run", 9)

    _as_instance(monkeypatch, runner_role, y2, "train/victim")
    resumed = _train_on(tmp_path, "y2", bucket)
    restored = resumed.restore()
    assert restored is not None and (restored.run_id, restored.epochs_done) == ("victims-run", 2), restored
    assert (resumed.local_dir / "chief" / "ckpt-1.index").read_text() == "honest weights"
    # Y2 writes its own prefix, never Y1's: the next attempt after it restores Y2's (the newest of the branch).
    assert resumed.uri != restored.source
    _checkpoint(resumed, "honest weights, epoch 3", "victims-run", 3)
    _as_instance(monkeypatch, runner_role, "i-0aaaaaaaaaaaaaaa3", "train/victim")
    assert checkpoint_owners.record(
        s3, bucket, branch="train/victim", commit=COMMIT, session="i-0aaaaaaaaaaaaaaa3"
    )
    third = _train_on(tmp_path, "y3", bucket).restore()
    assert third is not None and (third.run_id, third.epochs_done, third.source) == (
        "victims-run",
        3,
        resumed.uri,
    )


def test_instance_x_cannot_write_under_instance_y_checkpoint_prefix(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    """Attack: code on instance X pushes a checkpoint (the real store: uploads, stale deletes, the state file) into
    instance Y's prefix. Every write is refused by the deployed runner policy; the same push by Y is allowed."""
    from gpu_job import checkpoints

    role = stack["session"].client("iam").get_role(RoleName=runner_role_name(stack))["Role"]
    (policy,) = managed_policies(stack["session"], role["RoleName"])
    victims_prefix = (
        f"s3://{stack['bucket']}/checkpoints/{role['RoleId']}:{OTHER_INSTANCE}/train-y/{COMMIT[:12]}-abc"
    )
    for instance, expected in ((INSTANCE, False), (OTHER_INSTANCE, True)):
        session = instance_session(stack, instance)
        calls = record_calls(session)
        local = tmp_path / instance / "backup"
        (local / "chief").mkdir(parents=True)
        (local / "chief" / "ckpt-1.index").write_text("weights")
        store = checkpoints.S3Checkpoints(victims_prefix, local, session.client("s3"))
        store.push({"run_id": "r", "epochs_done": 1})
        (local / "chief" / "ckpt-1.index").unlink()
        (local / "chief" / "ckpt-2.index").write_text("weights")
        store.push({"run_id": "r", "epochs_done": 2})  # uploads, then deletes the stale ckpt-1
        writes = [
            r
            for r in as_caller(authorizations(calls), session, stack_vpc(stack))
            if r.action != "s3:ListBucket"
        ]
        assert {r.action for r in writes} == {"s3:PutObject", "s3:DeleteObject"}
        assert {allowed([policy], r) for r in writes} == {expected}, (instance, writes)


def test_only_the_default_branchs_launch_and_submit_roles_record_checkpoint_owners(
    stack: dict[str, Any], job_stack: dict[str, Any]
) -> None:
    """The record a resume trusts: created (If-None-Match: *) by the launch role (gpu-runner launch) and the Batch
    submit role (batch wait), never replaced; no training role, the sweep or the predict role may write it."""
    session, bucket = stack["session"], stack["bucket"]
    record = _object(bucket, checkpoint_owners.owners_key("train/x", COMMIT, INSTANCE))
    create = Request("s3:PutObject", record, {**s3_context(), "s3:if-none-match": "*"})
    replace = Request("s3:PutObject", record, s3_context())
    for output in ("TrainRoleArn", "PredictLaunchRoleArn"):
        policies = managed_policies(session, stack["outputs"][output].rsplit("/", 1)[-1])
        assert allowed(policies, create) and not allowed(policies, replace), output
    submit = managed_policies(session, job_stack["outputs"]["SubmitRoleArn"].rsplit("/", 1)[-1])
    assert allowed(submit, create) and not allowed(submit, replace)
    callers = _callers(stack, job_stack)
    others = {
        "runner": callers["runner"]["policies"],
        "job": callers["job"]["policies"],
        "sweep": managed_policies(session, stack["outputs"]["SweepRoleArn"].rsplit("/", 1)[-1]),
        "predict": managed_policies(session, stack["outputs"]["PredictRoleArn"].rsplit("/", 1)[-1]),
    }
    for name, policies in others.items():
        own = callers[name]["own"] if name in callers else {}
        for request in (create, replace, Request("s3:DeleteObject", record, s3_context())):
            assert not allowed(
                policies, Request(request.action, request.resource, {**request.context, **own})
            ), name


def test_training_logs_artifacts_through_the_servers_proxy_without_touching_s3(
    mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training may not write mlflow-artifacts/ (the policies above) and needs not: a server started with
    --artifacts-destination serves artifacts ("--serve-artifacts", on by default) and gives experiments an
    mlflow-artifacts:/ location, so the client uploads over HTTP and the server writes S3 with its own role. Here
    the client process cannot make an S3 client at all, and logging a model's file still works; the team server's
    boot script starts it that way (gpu_runner/mlflow_server/mlflow-server.yaml)."""
    import mlflow
    import mlflow.tracking

    def no_s3(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the training process made an AWS client: {args}")

    monkeypatch.setattr(boto3, "client", no_s3)
    monkeypatch.setattr(boto3.Session, "client", no_s3)
    client = mlflow.tracking.MlflowClient(mlflow_server)
    experiment = client.create_experiment(f"proxy-{uuid.uuid4().hex[:8]}")
    assert client.get_experiment(experiment).artifact_location.startswith("mlflow-artifacts:/")
    run = client.create_run(experiment)
    model = tmp_path / "model.tflite"
    model.write_bytes(b"weights")
    client.log_artifact(run.info.run_id, str(model), "exports")
    assert [f.path for f in client.list_artifacts(run.info.run_id, "exports")] == ["exports/model.tflite"]
    boot = SERVER_TEMPLATE.read_text(encoding="utf-8")
    assert "--serve-artifacts" in boot and "--artifacts-destination s3://$BUCKET/mlflow-artifacts" in boot
