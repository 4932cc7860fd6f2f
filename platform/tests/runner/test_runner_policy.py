"""The runner instance role's policy: what the boot script and the training job call, and one instance's JIT
config out of another's reach."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpu_job import checkpoints, s3sync
from gpu_runner import cli
from gpu_runner.core.naming import RunContext, parameter_name
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    as_caller,
    authorizations,
    caller_context,
    instance_session,
    managed_policies,
    runner_role_name,
    stack_vpc,
    wire_settings,
)
from gpu_runner_testing.iam_requests import (
    Call,
    Request,
    allowed,
    granted_actions,
    record_calls,
    s3_context,
)

BOOT_SCRIPT = Path(importlib.util.find_spec("gpu_runner.ec2_runner").origin).parent / "user_data.sh"
# What each AWS CLI command in the boot script is authorized as.
BOOT_SCRIPT_ACTIONS = {
    ("ssm", "get-parameter"): "ssm:GetParameter",
    ("ssm", "delete-parameter"): "ssm:DeleteParameter",
    ("s3", "cp"): "s3:GetObject",
}

INSTANCE_A = f"arn:aws:ec2:{REGION}:123456789012:instance/i-0aaaaaaaaaaaaaaaa"


def test_runner_role_reaches_only_the_bucket_and_its_parameters(stack: dict[str, Any]) -> None:
    session, outputs, settings, bucket = (
        stack["session"],
        stack["outputs"],
        stack["settings"],
        stack["bucket"],
    )
    iam = session.client("iam")
    profile = iam.get_instance_profile(InstanceProfileName=outputs["RunnerInstanceProfile"])[
        "InstanceProfile"
    ]
    (role,) = profile["Roles"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert session.client("iam").list_role_policies(RoleName=role["RoleName"])["PolicyNames"] == []
    (document,) = managed_policies(session, role["RoleName"])
    resources = {
        r
        for s in document["Statement"]
        if s["Effect"] == "Allow"  # the Deny (runner mirror writes) only narrows
        for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
    }
    assert resources == {
        f"arn:aws:s3:::{bucket}",
        f"arn:aws:s3:::{bucket}/*",  # read only (test_training_writes.py: what it may write)
        f"arn:aws:s3:::{bucket}/checkpoints/${{aws:userid}}/*",
        f"arn:aws:s3:::{bucket}/sweeps/*",
        f"arn:aws:ssm:{REGION}:123456789012:parameter{settings.ssm_prefix}/*",
    }
    assert granted_actions([document]) == {
        "s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "ssm:GetParameter", "ssm:DeleteParameter",
    }  # fmt: skip


def test_runner_role_covers_exactly_the_instance_and_training_calls(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    """The GPU instance's role: the boot script's AWS CLI commands and the training job's real S3 calls
    (checkpoint push, restore, stale deletes, completion; the data download) are all it is granted."""
    session, bucket, settings = stack["session"], stack["bucket"], stack["settings"]
    (policy,) = managed_policies(session, runner_role_name(stack))

    # The boot script: every `aws <service> <command>` in it, on this run's parameter and an S3 runner mirror.
    commands = set(re.findall(r"\baws ([a-z0-9-]+) ([a-z-]+)", BOOT_SCRIPT.read_text()))
    assert commands == set(BOOT_SCRIPT_ACTIONS), commands
    ctx = RunContext(DEFAULT_REPOSITORY, "9090", "1", "train/infra", "a" * 40)
    parameter = f"arn:aws:ssm:{REGION}:123456789012:parameter{parameter_name(settings.ssm_prefix, ctx)}"
    # The instance reads the parameter launch tagged with its own ARN (test_jit_config_isolation below).
    own = {"aws:ResourceTag/gpu-runner:instance-arn": INSTANCE_A, "ec2:SourceInstanceARN": INSTANCE_A}
    boot = [
        Request("ssm:GetParameter", parameter, own),
        Request("ssm:DeleteParameter", parameter, own),
        Request(
            "s3:GetObject",
            f"arn:aws:s3:::{bucket}/runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz",
            s3_context(),
        ),
    ]

    # The training job, through a recorded client of the instance's own role session (moto's AssumeRole names it
    # as EC2 names an instance's: aws:userid "<role id>:<instance id>"): the checkpoint store, restoring from a
    # predecessor's prefix the launch recorded for this branch, and the data download.
    plain = session.client("s3")
    for name in ("a/1.png", "b/2.png"):
        plain.put_object(Bucket=bucket, Key=f"data/{name}", Body=b"image")
    recorded_session = instance_session(stack, INSTANCE_A.rsplit("/", 1)[-1])
    calls = record_calls(recorded_session)
    client, sts = recorded_session.client("s3"), recorded_session.client("sts")
    local = tmp_path / "backup"
    (local / "chief").mkdir(parents=True)
    for name in ("checkpoint", "ckpt-1.index", "ckpt-1.data-00000-of-00001"):
        (local / "chief" / name).write_bytes(b"weights")
    commit = "a" * 40
    store = checkpoints.open_store(f"s3://{bucket}/checkpoints", "train/infra", commit, "abc", local,
                                   client=client, sts=sts)  # fmt: skip
    store.push({"run_id": "r1", "epochs_done": 1})
    (local / "chief" / "ckpt-1.index").unlink()
    store.push({"run_id": "r1", "epochs_done": 2})  # a stale file is deleted
    assert store.restore() is not None
    store.mark_complete({"run_id": "r1", "epochs_done": 2})
    s3sync.sync_prefix(f"s3://{bucket}/data", tmp_path / "data", client=client)

    # On the instance, through the stack VPC's S3 endpoint (RunnerPolicy's S3OnlyFromTheStackVpc).
    vpc = stack_vpc(stack)
    training = as_caller(authorizations(calls), recorded_session, vpc)
    assert {c.operation for c in calls} >= {"PutObject", "ListObjectsV2", "DeleteObjects", "GetObject"}
    denied = [r for r in [*boot, *training] if not allowed([policy], r)]
    assert denied == [], denied
    assert granted_actions([policy]) == {r.action for r in [*boot, *training]}
    # The runner mirror: readable, never writable (issue 13, item 8); every prefix: test_training_writes.py.
    mirror = f"arn:aws:s3:::{bucket}/runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz"
    assert allowed([policy], Request("s3:GetObject", mirror, s3_context()))
    assert not allowed([policy], Request("s3:PutObject", mirror, s3_context()))
    assert not allowed([policy], Request("s3:DeleteObject", mirror, s3_context()))
    own = caller_context(recorded_session, vpc)
    mine = f"arn:aws:s3:::{bucket}/checkpoints/{own['aws:userid']}/x"
    assert allowed([policy], Request("s3:PutObject", mine, {**s3_context(), **own}))
    # Another bucket, another project's parameters: refused.
    assert not allowed(
        [policy], Request("s3:GetObject", "arn:aws:s3:::someone-else/data/a.png", s3_context())
    )
    # The bucket's name, owned by another account (ours deleted, the name taken): aws:ResourceAccount refuses it.
    stranger = s3_context("210987654321")
    for action, resource in (("s3:ListBucket", f"arn:aws:s3:::{bucket}"), ("s3:GetObject", f"arn:aws:s3:::{bucket}/data/a.png"),
                             ("s3:PutObject", mine)):  # fmt: skip
        assert allowed([policy], Request(action, resource, {**s3_context(), **own})), action
        assert not allowed([policy], Request(action, resource, {**stranger, **own})), action
    other = f"arn:aws:ssm:{REGION}:123456789012:parameter/gpu-runner/other-project/1-1/jitconfig"
    assert not allowed([policy], Request("ssm:GetParameter", other))


def test_jit_config_isolation_each_instance_reads_and_deletes_only_its_own(
    stack: dict[str, Any],
    settings_file: Path,
    recorded: tuple[list[Call], boto3.Session],
    workflow_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Two concurrent runs, launched for real against the stack: instance B's role session can neither read nor
    delete A's config (nor A B's); each can its own; a session from no instance, none."""
    wire_settings(stack, settings_file)
    session = stack["session"]
    (runner_policy,) = managed_policies(session, runner_role_name(stack))
    runs = {key: _launch_run(settings_file, run_id, monkeypatch, tmp_path / key) for key, run_id in
            (("a", "7001"), ("b", "7002"))}  # fmt: skip
    arn = {k: f"arn:aws:ec2:{REGION}:123456789012:instance/{run['instance-id']}" for k, run in runs.items()}
    for action in ("ssm:GetParameter", "ssm:DeleteParameter"):
        for own, other in (("a", "b"), ("b", "a")):
            name = runs[own]["parameter"]
            assert allowed([runner_policy], _parameter_request(action, session, name, arn[own])), (
                action,
                own,
            )
            assert not allowed([runner_policy], _parameter_request(action, session, name, arn[other])), (
                f"instance {other} may {action} run {own}'s JIT config"
            )
            assert not allowed([runner_policy], _parameter_request(action, session, name, None))
    # A parameter under the prefix without the tag (written by hand, or by an older launch): nobody's.
    assert not allowed(
        [runner_policy],
        Request("ssm:GetParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter/gpu-runner/infra-test/x/jitconfig",
                {"ec2:SourceInstanceARN": arn["a"]}),
    )  # fmt: skip


def _launch_run(
    settings_file: Path, run_id: str, monkeypatch: pytest.MonkeyPatch, out: Path
) -> dict[str, str]:
    monkeypatch.setenv("GITHUB_RUN_ID", run_id)
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert cli.main(["--settings", str(settings_file), "launch", "--spot", "false"]) == 0
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def _parameter_request(action: str, session: boto3.Session, name: str, caller: str | None) -> Request:
    """The authorization of `action` on parameter `name` as the instance `caller` makes it (None: the request
    does not come from an instance-profile session, so ec2:SourceInstanceARN is absent)."""
    listed = session.client("ssm").list_tags_for_resource(ResourceType="Parameter", ResourceId=name)[
        "TagList"
    ]
    context = {f"aws:ResourceTag/{t['Key']}": t["Value"] for t in listed}
    if caller is not None:
        context["ec2:SourceInstanceARN"] = caller
    return Request(action, f"arn:aws:ssm:{REGION}:123456789012:parameter{name}", context)
