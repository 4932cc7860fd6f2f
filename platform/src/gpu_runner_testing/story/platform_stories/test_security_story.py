"""`make e2e`, security: the story on a branch whose name is a shell injection, with credentials that cannot be
mistaken for anything else, then a scan of everything the story left behind for those credentials.

train.yml passes branch names to scripts only through `env:`, so the injection must stay a string everywhere: in
the MLflow tag, the checkpoint prefix (sanitised by checkpoints.checkpoint_prefix) and the instance's tags.
The scan reads every file of the story (act's logs and work directories, the simulated instance's console,
user-data, call log and runner directory), the MLflow run (params, tags, artifacts, logged model), the story's S3
objects, EC2 tags, every SSM parameter, and the session's moto and MLflow server logs and store. The instance's
calls.log is the double's record, which a real instance ships nowhere; the console (ec2:GetConsoleOutput, and
`gpu-runner wait` prints it into the workflow log) and the user-data (ec2:DescribeInstanceAttribute, and the
instance metadata service) are not, so a JIT config there would be a real leak.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import string
import subprocess
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import boto3
import mlflow.artifacts
import pytest
from mlflow.tracking import MlflowClient

from gpu_runner_testing.github_double import decode_jit_config
from gpu_runner_testing.story.harness import PROJECT
from gpu_runner_testing.story.leak_scan import (
    Hit,
    jit_config_secrets,
    needles,
    random_key,
    scan_bytes,
    scan_tree,
)
from gpu_runner_testing.story.report import report_file
from gpu_runner_testing.story.stories import Scenario, Stack, Story, run_story, workflow_run_ids

pytestmark = pytest.mark.e2e
RUN_ID = "4242"
# Git forbids spaces in ref names; ${IFS} is the usual way around that in an injection.
HOSTILE_BRANCH = "train/$(touch${IFS}pwned)"
# checkpoints.checkpoint_prefix: each run of characters outside [A-Za-z0-9._-] becomes "-", then "-" is stripped.
CHECKPOINT_BRANCH = "train-touch-IFS-pwned"
# gpu_runner.core.naming.tag_value: characters EC2 tag values do not allow become "_".
EC2_TAG_BRANCH = "train/__touch__IFS_pwned_"
MARKER = "pwned"


# ------------------------------------------------------------------------------------------------ the tests
def test_hostile_branch_name_stays_a_string(security_story: SecurityStory, stack: Stack) -> None:
    story = security_story.story
    run, simulator = story.run, story.simulator
    assert run is not None and simulator is not None and story.github is not None
    context = f"act log: {run.log}\nsimulator errors: {simulator.errors}\ngithub calls: {story.github_calls}"
    assert run.lifecycle_results == {"start": "success", "train": "success", "stop": "success"}, context
    assert run.returncode == 0 and not simulator.errors, context
    # The injection ran nowhere: not in the repository, act's work directories, the instance, the project.
    shared = [Path.home(), Path("/tmp"), Path.cwd()]
    executed = files_named(MARKER, [story.scratch, PROJECT], shared, since=security_story.started_at)
    assert not executed, executed
    # ... and reached the code as the literal branch name.
    client = MlflowClient(stack.mlflow_uri)
    mlrun = client.get_run(_mlflow_run(stack))
    assert mlrun.info.status == "FINISHED"
    assert mlrun.data.tags["git.branch"] == HOSTILE_BRANCH
    assert mlrun.data.tags["git.commit"] == story.head_sha
    # Under the training session's own prefix (<checkpoint uri>/<aws:userid>/...), the branch sanitised.
    prefix = rf"{re.escape(stack.checkpoint_uri)}/[^/]+/{re.escape(CHECKPOINT_BRANCH)}/{story.head_sha[:12]}-"
    assert re.match(prefix, mlrun.data.tags["checkpoint.uri"]), mlrun.data.tags
    assert story.checkpoint_state().get("complete") is True
    reservations = stack.client("ec2").describe_instances(
        Filters=[{"Name": "tag:gpu-runner:run-id", "Values": [RUN_ID]}]
    )["Reservations"]
    tags = [{t["Key"]: t["Value"] for t in i.get("Tags", [])} for r in reservations for i in r["Instances"]]
    assert [t.get("gpu-runner:branch") for t in tags] == [EC2_TAG_BRANCH], tags
    # Training was not interrupted: the stop job dispatched nothing (it passes the branch as `--ref`).
    assert story.github.dispatches == []
    assert (story.instances_left, story.runners_left, story.params_left) == (0, 0, 0), context


def test_no_credential_reaches_any_log_output_or_artifact(
    security_story: SecurityStory, stack: Stack, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    story, named = security_story.story, security_story.secrets
    assert story.run is not None and story.github is not None
    # One JIT config per launch; the scan is only as good as the list of what to look for.
    assert len(story.github.issued_jit_configs) == 1, story.github.issued_jit_configs
    patterns = needles(named)
    hits: list[Hit] = []

    # Every file of the story: act-*.jsonl, what is left of act's work directories, instances/*/console.log,
    # calls.log, user-data.sh and the runner's directory, uploaded artifacts, the checked-out repository.
    hits += [(f"story:{where}", name) for where, name in scan_tree(story.scratch, patterns)]
    scanned = sum(len(files) for _d, _s, files in os.walk(story.scratch))
    assert scanned > 20 and list(story.scratch.glob("act-*.jsonl")), scanned
    assert list(story.scratch.glob("instances/i-*/console.log")), list(story.scratch.rglob("*"))
    # The credentials did pass through the workflow: act records the masked GITHUB_ENV lines of the
    # configure-aws-credentials double unmasked, so the raw log holds them (and the view above drops them).
    raw = set(scan_tree(story.scratch, patterns, view=lambda _path, data: data))
    assert {("act-push.jsonl", "AWS access key id"), ("act-push.jsonl", "AWS secret access key")} <= raw, raw
    # The session's servers, as an operator sees them: moto's request log, MLflow's log and its sqlite store.
    servers = [
        d for n in ("moto", "mlflow-server") for d in tmp_path_factory.getbasetemp().glob(f"{n}[0-9]*")
    ]
    assert any((d / "mlflow.db").exists() for d in servers), servers
    for server in servers:
        hits += [(f"server:{server.name}/{where}", name) for where, name in scan_tree(server, patterns)]
    parsed = {"outputs": story.run.outputs, "summaries": story.run.summaries}
    hits += scan_bytes("act: job outputs and summaries", json.dumps(parsed).encode(), patterns)
    if report_file().exists():
        hits += scan_bytes("e2e report", report_file().read_bytes(), patterns)

    # MLflow: what the run and its logged model hold, read back through the tracking server.
    client = MlflowClient(stack.mlflow_uri)
    run_id = _mlflow_run(stack)
    mlrun = client.get_run(run_id)
    experiment = client.get_experiment(mlrun.info.experiment_id)
    metadata = {
        "params": mlrun.data.params,
        "tags": mlrun.data.tags,
        "metrics": sorted(mlrun.data.metrics),
        "run name": mlrun.info.run_name,
        "experiment": [experiment.name, experiment.tags],
    }
    hits += scan_bytes("mlflow: run metadata", json.dumps(metadata).encode(), patterns)
    artifacts = Path(
        mlflow.artifacts.download_artifacts(
            run_id=run_id, dst_path=str(tmp_path / "run"), tracking_uri=stack.mlflow_uri
        )
    )
    assert any(artifacts.rglob("resolved_config.json")), list(artifacts.rglob("*"))
    hits += [(f"mlflow artifact:{w}", n) for w, n in scan_tree(artifacts, patterns)]
    models = client.search_logged_models(
        [mlrun.info.experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    assert len(models) == 1, models
    for model in models:
        model_meta = json.dumps({"params": model.params, "tags": model.tags, "name": model.name})
        hits += scan_bytes(f"mlflow: model {model.model_id}", model_meta.encode(), patterns)
        local = mlflow.artifacts.download_artifacts(
            artifact_uri=model.artifact_location, dst_path=str(tmp_path / model.model_id),
            tracking_uri=stack.mlflow_uri,
        )  # fmt: skip
        hits += [(f"mlflow model:{w}", n) for w, n in scan_tree(Path(local), patterns)]

    # AWS: the story's checkpoint objects (keys and bodies), every key of every bucket, EC2 tags, SSM.
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=stack.moto_endpoint)
    checkpoint_bucket, _, base = stack.checkpoint_uri[5:].partition("/")
    for bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                hits += scan_bytes(f"s3://{bucket} keys", obj["Key"].encode(), patterns)
                ours = obj["Key"].startswith(f"{base}/") and f"/{CHECKPOINT_BRANCH}/" in obj["Key"]
                if bucket == checkpoint_bucket and ours:
                    body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                    hits += scan_bytes(f"s3://{bucket}/{obj['Key']}", body, patterns)
    ec2 = stack.client("ec2")
    reservations = ec2.describe_instances(Filters=[{"Name": "tag:gpu-runner:run-id", "Values": [RUN_ID]}])
    hits += scan_bytes("ec2: instances", json.dumps(reservations, default=str).encode(), patterns)
    ssm = stack.client("ssm")
    names = [
        p["Name"] for page in ssm.get_paginator("describe_parameters").paginate() for p in page["Parameters"]
    ]
    # The one place the GitHub credential is meant to be (issue 13 item 2: a SecureString under the stack's key,
    # decrypted only by the launch and reaper roles, platform/tests/runner/test_key_policies.py); every other parameter is scanned.
    credential = stack.settings["ssm_prefix"].rstrip("/") + "-github-credential"
    assert credential in names
    for name in (n for n in names if n != credential):
        parameter = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]
        hits += scan_bytes(f"ssm:{name}", json.dumps(parameter, default=str).encode(), patterns)

    assert hits == [], "\n".join(f"{where}: {name}" for where, name in hits)


def test_the_scanner_finds_a_planted_secret(tmp_path: Path) -> None:
    """A scanner that cannot fail proves nothing: plant each kind of secret, raw and encoded, and find it."""
    jit = base64.b64encode(
        json.dumps(
            {
                ".runner": base64.b64encode(json.dumps({"AgentId": 7}).encode()).decode(),
                ".credentials": base64.b64encode(
                    json.dumps({"Data": {"clientId": "c" * 36}}).encode()
                ).decode(),
                ".credentials_rsaparams": base64.b64encode(
                    json.dumps({"d": "fake-secret-" + "ab" * 16}).encode()
                ).decode(),
            }
        ).encode()
    ).decode()
    named = {
        "token": "github_pat_planted_0123456789",
        "password": "planted-password-xyz",
        **jit_config_secrets("r", jit),
    }
    patterns = needles(named)
    (tmp_path / "clean.log").write_text("nothing to see\n" * 100)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "console.log").write_bytes(
        b"\x00\x01 token=github_pat_planted_0123456789 \xff"
    )
    # base64 at each of the three offsets, inside a longer blob: all must be found.
    for offset in range(3):
        blob = base64.b64encode(b"x" * offset + b'{"password": "planted-password-xyz"}')
        (tmp_path / f"b64-{offset}.txt").write_bytes(blob)
    # The JIT config with both layers decoded (someone printed the runner's private key).
    (tmp_path / "decoded.json").write_text(json.dumps(decode_jit_config(jit)))
    (tmp_path / "url.txt").write_text("https://x.invalid/?c=" + urllib.parse.quote(jit, safe=""))
    (tmp_path / "link").symlink_to(tmp_path / "deep" / "er" / "console.log")
    # act's log: a masked command argument is what GitHub does not show; the same value anywhere else is a leak.
    records = [
        {
            "command": "add-mask",
            "arg": named["password"],
            "raw": f"::add-mask::{named['password']}",
            "msg": "***",
        },
        {"command": "set-env", "name": "P", "arg": named["password"], "msg": "::set-env:: P=***"},
        {"command": "set-env", "name": "T", "arg": named["token"], "msg": f"::set-env:: T={named['token']}"},
        {"command": "set-output", "name": "o", "arg": named["password"], "msg": "::set-output:: o=***"},
    ]
    act_log = "\n".join(json.dumps(r) for r in records)
    (tmp_path / "act-masked.jsonl").write_text("\n".join(json.dumps(r) for r in records[:2]))
    # Here the token's message is unmasked and the password is a step output: both are found.
    (tmp_path / "act-push.jsonl").write_text("not json\n" + act_log)

    hits = set(scan_tree(tmp_path, patterns))
    assert ("deep/er/console.log", "token") in hits
    assert {
        ("b64-0.txt", "password (base64)"),
        ("b64-1.txt", "password (base64)"),
        ("b64-2.txt", "password (base64)"),
    } <= hits
    assert ("decoded.json", "JIT config r RSA key") in hits
    assert ("url.txt", "JIT config r (percent-encoded)") in hits
    assert not {h for h in hits if h[0] in ("clean.log", "link", "act-masked.jsonl")}, hits
    assert {("act-push.jsonl", "token"), ("act-push.jsonl", "password")} <= hits
    assert ("act-masked.jsonl", "password") in set(scan_tree(tmp_path, patterns, view=lambda _p, data: data))
    with pytest.raises(ValueError, match="too short"):
        needles({"short": "testing"})


def test_the_branch_name_is_a_working_injection(tmp_path: Path) -> None:
    """The hostile story proves something only if the name does run a command when a shell expands it, and the
    search finds what that command leaves."""
    subprocess.run(["bash", "-c", f'echo "checking out {HOSTILE_BRANCH}"'], cwd=tmp_path, check=True)
    assert files_named(MARKER, [tmp_path]) == [tmp_path / MARKER]
    assert files_named(MARKER, [], shared=[tmp_path], since=time.time() - 60) == [tmp_path / MARKER]


# ------------------------------------------------------------------------------------------------ the story
@dataclass
class SecurityStory:
    story: Story
    secrets: dict[str, str]  # name -> value, everything the story was given or issued
    started_at: float


@pytest.fixture(scope="module")
def security_story(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> SecurityStory:
    """One story for both tests (a story costs about a minute): the hostile branch, distinctive credentials,
    and the model logged, so the scan also covers what MLflow stores with it."""
    aws_key_id = random_key("AKIAE2E", 13, string.ascii_uppercase + string.digits)
    aws_secret = random_key("", 40, string.ascii_letters + string.digits)
    token = random_key("github_pat_e2e_", 40, string.ascii_letters + string.digits)
    mlflow_password = random_key("mlflow-", 24, string.ascii_letters + string.digits)
    scenario = Scenario(
        90, "hostile branch name, distinctive credentials", "all green; nothing executed; nothing leaked",
        train={"training": {"epochs": 3}, "tracking": {"log_system_metrics": False}},
        branch=HOSTILE_BRANCH, aws_credentials=(aws_key_id, aws_secret), github_token=token,
        secrets={"MLFLOW_TRACKING_USERNAME": "e2e-mlflow-user", "MLFLOW_TRACKING_PASSWORD": mlflow_password},
    )  # fmt: skip
    started_at = time.time()
    story = run_story(stack, scenario, tmp_path_factory.mktemp("security-story"), RUN_ID)
    assert story.github is not None
    named = {
        "GitHub token": token,
        "AWS access key id": aws_key_id,
        "AWS secret access key": aws_secret,
        "MLflow password": mlflow_password,
    }
    for index, installation_token in enumerate(story.github.installation_tokens):
        named[f"GitHub installation token {index}"] = installation_token
    for name, encoded in story.github.issued_jit_configs.items():
        named.update(jit_config_secrets(name, encoded))
    return SecurityStory(story, named, started_at)


def _mlflow_run(stack: Stack) -> str:
    client = MlflowClient(stack.mlflow_uri)
    runs = workflow_run_ids(client, RUN_ID)
    assert len(runs) == 1, runs
    return runs[0]


def files_named(
    name: str, roots: Iterable[Path], shared: Iterable[Path] = (), since: float = 0.0
) -> list[Path]:
    """Files or directories called `name` anywhere under `roots`, or directly in a `shared` directory (which
    others use too: only what changed since `since` counts)."""
    found = []
    for root in roots:
        for directory, dirs, files in os.walk(root):
            found += [Path(directory) / n for n in [*dirs, *files] if n == name]
    for directory in shared:
        path = directory / name
        with contextlib.suppress(FileNotFoundError):
            if path.lstat().st_mtime >= since:
                found.append(path)
    return found
