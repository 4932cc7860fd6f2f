"""The studies under s3://<bucket>/sweeps/ are append-only for every role that may write there.

Attack: code in a training job (RunnerRole: a train branch pusher, or a dependency they pulled in) or in a sweep
branch's plan or collect job (SweepRole) overwrites or deletes another study's journal objects or replaces a wave
claim, silently changing which trial is best and what the registry promotes. Each call below is made for real
with boto3 against the stack on the moto server (moto does not enforce IAM: it accepts them all), recorded, and
authorized against the role's deployed policy by gpu_runner_testing.iam_requests. The product's own writes, made by the real
study store, stay allowed.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from gpu_job import study_storage
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    authorizations,
    managed_policies,
    role_policies,
    runner_role_name,
)
from gpu_runner_testing.iam_requests import Call, Request, allowed, record_calls, s3_context

ROLES = ("runner", "sweep")


def _policy(stack: dict[str, Any], role: str) -> list[dict[str, Any]]:
    if role == "runner":
        return managed_policies(stack["session"], runner_role_name(stack))
    return role_policies(stack, "SweepRoleArn")


def _victim(stack: dict[str, Any], name: str) -> tuple[str, list[str]]:
    """Another study, written by the real study store: its URI and its journal and wave-claim keys."""
    client = stack["session"].client("s3")
    uri = f"s3://{stack['bucket']}/sweeps/{name}/"
    journal = study_storage.S3JournalBackend(uri, client=client)
    journal.append_logs([{"op_code": 0, "study_name": name}])
    journal.append_logs([{"op_code": 6, "trial_id": 0, "state": 1, "values": [0.9]}])
    study_storage.claim_wave(uri, 1, {"trials": [0]}, client=client)
    listed = client.list_objects_v2(Bucket=stack["bucket"], Prefix=f"sweeps/{name}/")["Contents"]
    return uri, sorted(o["Key"] for o in listed)


def _attempt(attack: str, s3: Any, bucket: str, keys: list[str]) -> None:
    """One attack, as boto3 sends it. `keys`: the victim's journal objects and its wave claim."""
    journal, claim = keys[0], keys[-1]
    forged = b'{"op_code":6,"trial_id":0,"state":1,"values":[0.1]}\n'
    if attack == "overwrite-a-journal-object":
        s3.put_object(Bucket=bucket, Key=journal, Body=forged)
    elif attack == "overwrite-if-it-matches":  # If-Match: replace exactly the object read (botocore IfMatch)
        etag = s3.head_object(Bucket=bucket, Key=journal)["ETag"]
        s3.put_object(Bucket=bucket, Key=journal, Body=forged, IfMatch=etag)
    elif attack == "replace-a-wave-claim":
        s3.put_object(Bucket=bucket, Key=claim, Body=b'{"trials": [7]}', ContentType="application/json")
    elif attack == "delete-a-journal-object":
        s3.delete_object(Bucket=bucket, Key=journal)
    elif attack == "delete-a-version-for-good":
        # moto's deployed bucket may be unversioned: its objects then have the version id "null" (S3 User Guide,
        # "Working with objects in a versioning-suspended bucket"), which DeleteObject accepts as well.
        version = s3.head_object(Bucket=bucket, Key=journal).get("VersionId", "null")
        s3.delete_object(Bucket=bucket, Key=journal, VersionId=version)
    elif attack == "delete-the-study-in-one-call":
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    elif attack == "copy-over-a-journal-object":
        s3.copy_object(Bucket=bucket, Key=journal, CopySource={"Bucket": bucket, "Key": keys[1]})
    elif attack == "copy-over-unless-the-source-matches":  # a header on the SOURCE, not If-None-Match
        s3.copy_object(Bucket=bucket, Key=journal, CopySource={"Bucket": bucket, "Key": keys[1]},
                       CopySourceIfNoneMatch='"not-its-etag"')  # fmt: skip
    elif attack == "overwrite-by-multipart-upload":
        upload = s3.create_multipart_upload(Bucket=bucket, Key=journal)["UploadId"]
        part = s3.upload_part(Bucket=bucket, Key=journal, UploadId=upload, PartNumber=1, Body=forged)
        s3.complete_multipart_upload(Bucket=bucket, Key=journal, UploadId=upload,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})  # fmt: skip
    else:
        raise AssertionError(f"unknown attack {attack}")


ATTACKS = (
    "overwrite-a-journal-object",
    "overwrite-if-it-matches",
    "replace-a-wave-claim",
    "delete-a-journal-object",
    "delete-a-version-for-good",
    "delete-the-study-in-one-call",
    "copy-over-a-journal-object",
    "copy-over-unless-the-source-matches",
    "overwrite-by-multipart-upload",
)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("attack", ATTACKS)
def test_no_role_rewrites_or_deletes_a_study(stack: dict[str, Any], role: str, attack: str) -> None:
    """Every write or delete of an existing study object is refused: at least one authorization of the call
    (all of them, for the deletes and the overwriting writes) is denied by the role's deployed policy."""
    policy = _policy(stack, role)
    _, keys = _victim(stack, f"victim-{role}-{attack}")
    assert len(keys) == 3 and keys[-1].endswith("/waves/1.json"), keys
    session = boto3.Session(region_name=REGION)
    calls: list[Call] = record_calls(session)
    _attempt(attack, session.client("s3"), stack["bucket"], keys)
    writes = [
        r
        for r in authorizations(calls)
        if r.action in {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"}
    ]
    assert writes, attack
    permitted = [r for r in writes if allowed(policy, r)]
    assert permitted == [], (role, attack, permitted)


@pytest.mark.parametrize("role", ROLES)
def test_the_study_store_still_appends_and_claims(stack: dict[str, Any], role: str) -> None:
    """The product's own calls (the real study store: journal appends, replay, a new wave claim) are all
    allowed for both roles, and a second claim of the same wave is S3's 412, not an overwrite."""
    policy = _policy(stack, role)
    uri, _ = _victim(stack, f"own-{role}")
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    s3 = session.client("s3")
    journal = study_storage.S3JournalBackend(uri, client=s3)
    assert len(journal.read_logs(0)) == 2
    journal.append_logs([{"op_code": 6, "trial_id": 1, "state": 1, "values": [0.8]}])
    study_storage.claim_wave(uri, 2, {"trials": [1]}, client=s3)
    with pytest.raises(study_storage.WaveAlreadyClaimed):
        study_storage.claim_wave(uri, 2, {"trials": [9]}, client=s3)
    assert study_storage.read_wave(uri, 2, client=s3) == {"trials": [1]}
    requests = authorizations(calls)
    assert {r.action for r in requests} == {"s3:ListBucket", "s3:GetObject", "s3:PutObject"}
    denied = [r for r in requests if not allowed(policy, r)]
    assert denied == [], denied


def test_runner_role_keeps_overwriting_and_deleting_its_own_checkpoints(stack: dict[str, Any]) -> None:
    """The Denies reach sweeps/ only: the session's own checkpoints (a sweep trial's too, under
    checkpoints/<aws:userid>/sweeps/...) stay writable and deletable without If-None-Match, as the checkpoint store
    needs. What else training may not write: test_training_writes.py."""
    (policy,) = managed_policies(stack["session"], runner_role_name(stack))
    own = {**s3_context(), "aws:userid": "AROAEXAMPLEROLEID:i-0aaaaaaaaaaaaaaaa"}
    me = own["aws:userid"]
    for key in (f"checkpoints/{me}/sweeps/lr/trial-0/sweep-x/{'c' * 12}-abc/files/chief/ckpt-1.index",
                f"checkpoints/{me}/train-x/{'c' * 12}-abc/state.json"):  # fmt: skip
        resource = f"arn:aws:s3:::{stack['bucket']}/{key}"
        for action in ("s3:PutObject", "s3:DeleteObject"):
            assert allowed([policy], Request(action, resource, own)), (action, key)
    inside = f"arn:aws:s3:::{stack['bucket']}/sweeps/lr/journal/000000000000.jsonl"
    assert not allowed([policy], Request("s3:PutObject", inside, s3_context()))
    assert allowed([policy], Request("s3:PutObject", inside, {**s3_context(), "s3:if-none-match": "*"}))
    # A value other than "*" (S3 expects only "*"): refused all the same.
    assert not allowed([policy], Request("s3:PutObject", inside, {**s3_context(), "s3:if-none-match": '"x"'}))


# --- the evaluator's Null and negated string operators (gpu_runner_testing.iam_requests), against the IAM User Guide ------


def _statement(operator: str, value: Any, effect: str = "Allow") -> dict[str, Any]:
    return {"Effect": effect, "Action": "s3:PutObject", "Resource": "*",
            "Condition": {operator: {"s3:if-none-match": value}}}  # fmt: skip


def _holds(operator: str, value: Any, context: dict[str, str]) -> bool:
    policy = {"Version": "2012-10-17", "Statement": [_statement(operator, value)]}
    return allowed([policy], Request("s3:PutObject", "arn:aws:s3:::b/k", context))


@pytest.mark.parametrize(
    ("operator", "value", "context", "expected"),
    [
        # Null: "true" = the key is absent, "false" = present ("Condition operators", Null check).
        ("Null", "true", {}, True),
        ("Null", "true", {"s3:if-none-match": "*"}, False),
        ("Null", "false", {"s3:if-none-match": "*"}, True),
        ("Null", "false", {}, False),
        ("Null", True, {}, True),  # a JSON boolean, as YAML may render it
        ("Null", ["true", "false"], {}, True),  # several values are OR'd
        # A negated operator holds for an absent key ("Condition operators", the Important box).
        ("StringNotEquals", "*", {}, True),
        ("StringNotEquals", "*", {"s3:if-none-match": "*"}, False),
        ("StringNotEquals", "*", {"s3:if-none-match": '"etag"'}, True),
        ("StringNotEquals", ["*", "a"], {"s3:if-none-match": "a"}, False),
        ("StringNotLike", "a*", {"s3:if-none-match": "abc"}, False),
        ("StringNotLike", "a*", {"s3:if-none-match": "xbc"}, True),
        # The positive operator, for contrast: an absent key never matches.
        ("StringEquals", "*", {}, False),
    ],
)
def test_evaluator_null_and_negated_operators(
    operator: str, value: Any, context: dict[str, str], expected: bool
) -> None:
    assert _holds(operator, value, context) is expected


def test_evaluator_refuses_a_null_value_that_is_not_a_boolean() -> None:
    with pytest.raises(ValueError, match="Null takes true or false"):
        _holds("Null", "absent", {})


def test_evaluator_deny_with_null_beats_an_allow() -> None:
    """The shape of the deployed statements: Allow PutObject, Deny it when If-None-Match is absent."""
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "*"}, _statement("Null", "true", "Deny")]}  # fmt: skip
    request = Request("s3:PutObject", "arn:aws:s3:::b/k")
    assert not allowed([policy], request)
    assert allowed([policy], Request(request.action, request.resource, {"s3:if-none-match": "*"}))
