"""Checkpoints mirrored to (moto) S3 (gpu_job.checkpoints); the Keras callback that pushes them during fit(), and
the config fields that name them, are tested in a generated project (test_callbacks.py, test_checkpoints.py)."""

from pathlib import Path

import boto3
import pytest

from gpu_job.checkpoints import (
    S3Checkpoints,
    checkpoint_prefix,
    config_hash,
    open_store,
    owners_prefix,
    session_prefix,
)
from gpu_job.errors import DataError

BUCKET = "checkpoints-test"


@pytest.fixture(scope="module")
def bucket(moto_endpoint: str) -> str:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return BUCKET


def test_prefix_is_per_branch_commit_and_config() -> None:
    digest = config_hash({"training": {"epochs": 3}})
    assert digest != config_hash({"training": {"epochs": 4}})
    uri = checkpoint_prefix("s3://b/ckpt/", "train/$(touch x)", "a" * 40, digest)
    assert uri == f"s3://b/ckpt/train-touch-x/{'a' * 12}-{digest}"


def test_missing_bucket_names_the_field_and_the_fix(moto_endpoint: str, tmp_path: Path) -> None:
    store = S3Checkpoints("s3://no-such-bucket-here/x", tmp_path)
    with pytest.raises(
        DataError, match=r"training\.checkpoint_uri .*does not exist.*make bootstrap creates it"
    ):
        store.restore()


def test_push_mirrors_and_restore_ignores_a_finished_prefix(bucket: str, tmp_path: Path) -> None:
    local = tmp_path / "backup"
    (local / "chief").mkdir(parents=True)
    (local / "chief" / "old.index").write_text("old")
    store = S3Checkpoints(f"s3://{bucket}/mirror", local)
    assert store.push({"run_id": "r1", "epochs_done": 1}) == 1
    (local / "chief" / "old.index").unlink()
    (local / "chief" / "new.index").write_text("new")
    store.push({"run_id": "r1", "epochs_done": 2})
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="mirror/")["Contents"]]
    assert sorted(keys) == ["mirror/files/chief/new.index", "mirror/state.json"]

    fresh = S3Checkpoints(f"s3://{bucket}/mirror", tmp_path / "elsewhere")
    restored = fresh.restore()
    assert restored is not None and (restored.run_id, restored.epochs_done, restored.files) == ("r1", 2, 1)
    assert (tmp_path / "elsewhere" / "chief" / "new.index").read_text() == "new"
    store.mark_complete({"run_id": "r1", "epochs_done": 2})
    assert fresh.restore() is None


def _state(uri: str) -> dict:
    return S3Checkpoints(uri, Path()).state() or {}


def test_a_session_writes_under_its_own_id_and_restores_its_predecessors_newest(
    bucket: str, tmp_path: Path
) -> None:
    """Two earlier attempts of one branch and commit (sessions recorded under owners/) and an attempt of another
    branch: the new session writes under its own aws:userid and restores the newest of its branch's, in its run."""
    s3 = boto3.client("s3")
    commit, branch = "e" * 40, "train/x"
    for session, branch_of in (("i-0aaaaaaaaaaaaaaa1", branch), ("i-0aaaaaaaaaaaaaaa2", branch),
                               ("i-0bbbbbbbbbbbbbbbb", "train/other"), ("not-a-session", branch)):  # fmt: skip
        s3.put_object(Bucket=bucket, Key=owners_prefix("ck/", branch_of, commit) + session, Body=b"{}")
    for session, epochs in (
        ("i-0aaaaaaaaaaaaaaa1", 2),
        ("i-0aaaaaaaaaaaaaaa2", 4),
        ("i-0bbbbbbbbbbbbbbbb", 9),
    ):
        prefix = session_prefix(f"s3://{bucket}/ck", f"AROAEXAMPLE:{session}", branch, commit, "d1")
        local = tmp_path / session
        (local / "chief").mkdir(parents=True)
        (local / "chief" / "ckpt.index").write_text(session)
        S3Checkpoints(prefix, local).push({"run_id": "r", "epochs_done": epochs})

    class Sts:
        def get_caller_identity(self) -> dict[str, str]:
            return {"UserId": "AROAEXAMPLE:i-0aaaaaaaaaaaaaaa3"}

    store = open_store(f"s3://{bucket}/ck", branch, commit, "d1", tmp_path / "new", sts=Sts())
    assert store.uri == f"s3://{bucket}/ck/AROAEXAMPLE:i-0aaaaaaaaaaaaaaa3/train-x/{'e' * 12}-d1"
    assert len(store.predecessors) == 2  # the other branch's session and the malformed key are not candidates
    restored = store.restore()
    assert restored is not None and restored.epochs_done == 4
    assert restored.source.endswith(f"/AROAEXAMPLE:i-0aaaaaaaaaaaaaaa2/train-x/{'e' * 12}-d1")
    assert (tmp_path / "new" / "chief" / "ckpt.index").read_text() == "i-0aaaaaaaaaaaaaaa2"
    # A finished newest checkpoint: a fresh start, even with an older unfinished one beside it.
    S3Checkpoints(store.uri, tmp_path / "new").mark_complete({"run_id": "r", "epochs_done": 5})
    assert (
        open_store(f"s3://{bucket}/ck", branch, commit, "d1", tmp_path / "again", sts=Sts()).restore() is None
    )


def test_an_identity_without_a_session_has_no_predecessors(bucket: str, tmp_path: Path) -> None:
    """An IAM user or the root (a person running `train` by hand): its own prefix only, nothing listed."""

    class Sts:
        def get_caller_identity(self) -> dict[str, str]:
            return {"UserId": "AIDAEXAMPLEUSER"}

    store = open_store(f"s3://{bucket}/ck", "main", "f" * 40, "d2", tmp_path, sts=Sts())
    assert (store.uri, store.predecessors) == (f"s3://{bucket}/ck/AIDAEXAMPLEUSER/main/{'f' * 12}-d2", ())
