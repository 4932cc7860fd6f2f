"""Checkpoints mirrored to (moto) S3; the Keras callback that pushes them during fit() is in test_callbacks.py."""

from pathlib import Path

import boto3
import pytest

from {{ cookiecutter.package_name }}.checkpoints import S3Checkpoints, checkpoint_prefix, config_hash
from {{ cookiecutter.package_name }}.config import ConfigError, config_from_dict
from {{ cookiecutter.package_name }}.errors import DataError

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


def test_same_training_on_another_machine_finds_the_same_checkpoint() -> None:
    here = config_from_dict({"training": {"checkpoint_dir": "/a", "watch_interruptions": True}})
    there = config_from_dict({"training": {"checkpoint_dir": "/b", "checkpoint_uri": "s3://b/x"}})
    assert config_hash(here.trajectory()) == config_hash(there.trajectory())
    longer = config_from_dict({"training": {"epochs": 21}})
    assert config_hash(longer.trajectory()) != config_hash(here.trajectory())


def test_checkpoint_uri_must_be_s3_with_a_bucket() -> None:
    for bad in ("/local/dir", "s3://", "gs://bucket/x"):
        with pytest.raises(ConfigError, match=r"training\.checkpoint_uri"):
            config_from_dict({"training": {"checkpoint_uri": bad}})


def test_missing_bucket_names_the_field_and_the_fix(moto_endpoint: str, tmp_path: Path) -> None:
    store = S3Checkpoints("s3://no-such-bucket-here/x", tmp_path)
    with pytest.raises(DataError, match=r"training\.checkpoint_uri .*does not exist.*infra/"):
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
