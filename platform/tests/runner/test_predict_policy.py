"""The predict role's policy (issue 16: predict.yml's resolve and cpu predict jobs, default branch only), and the
instance role's share of a GPU prediction: the calls a batch prediction makes, made for real against the stack on
the moto server and authorized against the deployed policies, and every write outside predictions/ refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig

from gpu_job import s3sync
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    authorizations,
    managed_policies,
    role_policies,
    runner_role_name,
)
from gpu_runner_testing.iam_requests import (
    ACCOUNT,
    Request,
    allowed,
    granted_actions,
    launch_path_requests,
    record_calls,
    s3_context,
)

BATCH = "predictions/digits-2026-12-01"
BUCKET = "<the stack's bucket>"  # put in by each test (the bucket's name is made per session)
# The smallest part S3 accepts in a multipart upload (all parts but the last: S3 User Guide, "Amazon S3 multipart
# upload limits", 5 MiB): a shard above it goes up in parts, as boto3's transfer manager sends a large Parquet file.
PART = 5 * 1024 * 1024


def _batch_prediction(session: boto3.Session, bucket: str, tmp_path: Path) -> list[str]:
    """What a batch prediction does in S3: download the inputs (the job library's s3sync, as training does) and the
    model, write a shard whole (a `.partial` key, then the shard, then the partial deleted), a shard large enough
    for a multipart upload, the summary and the manifest, and read the manifest back (the rerun check)."""
    client = session.client("s3")
    s3sync.sync_prefix(f"s3://{bucket}/inputs/batch-1", tmp_path / "inputs", client=client)
    client.get_object(Bucket=bucket, Key="exports/model_int8.tflite")["Body"].read()
    client.put_object(Bucket=bucket, Key=f"{BATCH}/part-00000.parquet.partial", Body=b"rows")
    client.put_object(Bucket=bucket, Key=f"{BATCH}/part-00000.parquet", Body=b"rows")
    client.delete_object(Bucket=bucket, Key=f"{BATCH}/part-00000.parquet.partial")
    big = tmp_path / "part-00001.parquet"
    big.write_bytes(b"r" * (PART + 1))
    client.upload_file(str(big), bucket, f"{BATCH}/part-00001.parquet",
                       Config=TransferConfig(multipart_threshold=PART, multipart_chunksize=PART))  # fmt: skip
    for name in ("_summary.json", "_manifest.json"):
        client.put_object(Bucket=bucket, Key=f"{BATCH}/{name}", Body=b"{}")
    client.head_object(Bucket=bucket, Key=f"{BATCH}/_manifest.json")
    return sorted(p.name for p in (tmp_path / "inputs").rglob("*.png"))


@pytest.fixture
def inputs(stack: dict[str, Any]) -> str:
    """Two input images and an export in the stack's bucket, written with the test's own (unrecorded) client."""
    bucket, plain = stack["bucket"], stack["session"].client("s3")
    for name in ("a/1.png", "b/2.png"):
        plain.put_object(Bucket=bucket, Key=f"inputs/batch-1/{name}", Body=b"image")
    plain.put_object(Bucket=bucket, Key="exports/model_int8.tflite", Body=b"model")
    return bucket


def test_predict_role_covers_exactly_a_batch_prediction(
    stack: dict[str, Any], inputs: str, tmp_path: Path
) -> None:
    """Every call is allowed, and every action the policy grants is one of them."""
    recorded_session = boto3.Session(region_name=REGION)
    calls = record_calls(recorded_session)
    assert _batch_prediction(recorded_session, inputs, tmp_path) == ["1.png", "2.png"]
    assert {c.operation for c in calls} == {
        "ListObjectsV2", "GetObject", "HeadObject", "PutObject", "DeleteObject",
        "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
    }  # fmt: skip
    requests = authorizations(calls)
    policy = role_policies(stack, "PredictRoleArn")
    denied = [r for r in requests if not allowed(policy, r)]
    assert denied == [], denied
    assert granted_actions(policy) == {r.action for r in requests}


def test_the_gpu_instance_role_writes_none_of_the_same_batch_prediction(
    stack: dict[str, Any], inputs: str, tmp_path: Path
) -> None:
    """The gpu device's job runs on an instance whose runner role may write no prediction (training code on any
    runner must not replace a batch's shards: test_training_writes.py): predict.yml's
    GPU job predicts with the predict role through OIDC (a project's tests/workflows/test_predict_workflow.py).
    With the instance role the same prediction could read its inputs and export, and none of its writes would be
    allowed."""
    recorded_session = boto3.Session(region_name=REGION)
    calls = record_calls(recorded_session)
    _batch_prediction(recorded_session, inputs, tmp_path)
    (policy,) = managed_policies(stack["session"], runner_role_name(stack))
    requests = authorizations(calls)
    writes = [r for r in requests if r.action in {"s3:PutObject", "s3:DeleteObject"}]
    assert writes and not any(allowed([policy], r) for r in writes), writes
    reads = [r for r in requests if r not in writes]
    assert reads and all(allowed([policy], r) for r in reads), reads


def _s3(action: str, key: str, **context: str) -> Request:
    resource = f"arn:aws:s3:::{BUCKET}/{key}" if key else f"arn:aws:s3:::{BUCKET}"
    return Request(action, resource, {"aws:RequestedRegion": REGION, **s3_context(), **context})


INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
REFUSED = {
    # Writes outside predictions/: the checkpoints of any branch, the exports (the model of record), the studies,
    # the runner tarball the next instance boots, the reaper's package, the inputs, a look-alike prefix.
    "write-a-checkpoint": _s3("s3:PutObject", "checkpoints/train-x/abc/chief/ckpt-1.index"),
    "overwrite-an-export": _s3("s3:PutObject", "exports/model_int8.tflite"),
    "delete-an-export": _s3("s3:DeleteObject", "exports/model_int8.tflite"),
    "append-to-a-study": _s3("s3:PutObject", "sweeps/lr/journal/000000000007.jsonl", **{"s3:if-none-match": "*"}),
    "replace-the-runner-tarball": _s3("s3:PutObject", "runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz"),
    "delete-the-runner-tarball": _s3("s3:DeleteObject", "runner-mirror/actions-runner-linux-x64-2.330.0.tar.gz"),
    "replace-the-reaper-package": _s3("s3:PutObject", "gpu-runner/reaper-lambda/" + "0" * 64 + ".zip"),
    "overwrite-an-input": _s3("s3:PutObject", "inputs/batch-1/a/1.png"),
    "delete-an-input": _s3("s3:DeleteObject", "inputs/batch-1/a/1.png"),
    "look-alike-prefix": _s3("s3:PutObject", "predictions-evil/x"),
    "the-prefix-without-its-slash": _s3("s3:PutObject", "predictions"),
    "a-nested-predictions-folder-elsewhere": _s3("s3:PutObject", "exports/predictions/x"),
    # Versioning keeps what a delete replaced: removing a version for good is not granted, not even in predictions/.
    "delete-a-prediction-version": _s3("s3:DeleteObjectVersion", f"{BATCH}/part-00000.parquet"),
    # A bucket of that name in another account (after ours was deleted): neither read nor written.
    "read-a-strangers-bucket": Request(
        "s3:GetObject", f"arn:aws:s3:::{BUCKET}/inputs/x.png", {"aws:RequestedRegion": REGION, **s3_context("999999999999")}
    ),
    "write-a-strangers-bucket": Request(
        "s3:PutObject", f"arn:aws:s3:::{BUCKET}/{BATCH}/x", {"aws:RequestedRegion": REGION, **s3_context("999999999999")}
    ),
    "another-bucket": Request("s3:GetObject", "arn:aws:s3:::someone-else/inputs/x.png", s3_context()),
    "bucket-policy": _s3("s3:PutBucketPolicy", ""),
    "bucket-versioning": _s3("s3:PutBucketVersioning", ""),
    # The launch path and the GitHub credential.
    **launch_path_requests(REGION, DEFAULT_REPOSITORY),
    "terminate-an-instance": Request("ec2:TerminateInstances", INSTANCE, {"ec2:ResourceTag/gpu-runner:managed-by": "gpu-runner"}),
    "pass-the-runner-role": Request(
        "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/runner", {"iam:PassedToService": "ec2.amazonaws.com"}
    ),
    "decrypt-directly": Request("kms:Decrypt", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/x", {"aws:RequestedRegion": REGION}),
}  # fmt: skip


@pytest.mark.parametrize("attack", REFUSED, ids=list(REFUSED))
def test_predict_role_writes_nothing_outside_the_predictions(stack: dict[str, Any], attack: str) -> None:
    request = REFUSED[attack]
    request = Request(request.action, request.resource.replace(BUCKET, stack["bucket"]), request.context)
    policy = role_policies(stack, "PredictRoleArn")
    assert not allowed(policy, request), attack
    # Not vacuous: the same write (or delete) under predictions/ of our bucket is allowed.
    if request.action in {"s3:PutObject", "s3:DeleteObject"} and "999999999999" not in str(request.context):
        inside = Request(
            request.action, f"arn:aws:s3:::{stack['bucket']}/{BATCH}/part-00000.parquet", {**s3_context()}
        )
        assert allowed(policy, inside), attack
