"""Which checkpoint a training restores is decided by its config: the fields that change the trajectory, and where
the checkpoints go. The S3 mirror itself (the platform's gpu_job.checkpoints) is tested in the template repository
(platform/tests/job/test_checkpoints.py); the Keras callback that pushes during fit() in test_callbacks.py."""

from pathlib import Path
from typing import Any

import pytest
from gpu_job import checkpoints
from gpu_job.checkpoints import config_hash

from {{ cookiecutter.package_name }} import train
from {{ cookiecutter.package_name }}.config import ConfigError, config_from_dict


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


def test_the_training_opens_the_platforms_store_with_its_runs_branch_commit_and_trajectory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The seam the platform's resume attack (template `platform/tests/runner/test_training_writes.py`) drives
    as this training would: the branch and commit the run is tagged with, from the job's environment, this
    config's trajectory and the local backup folder."""
    opened: list[tuple[Any, ...]] = []
    monkeypatch.setattr(checkpoints, "open_store", lambda *args, **kwargs: opened.append((*args, kwargs)))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_REF_NAME", "train/victim")
    monkeypatch.setenv("TRAIN_COMMIT", "c" * 40)
    cfg = config_from_dict(
        {"training": {"checkpoint_uri": "s3://bucket/checkpoints", "checkpoint_dir": str(tmp_path)}}
    )
    train._checkpoint_store(cfg, "sweeps/s/trial-1")
    assert opened == [
        ("s3://bucket/checkpoints", "train/victim", "c" * 40, config_hash(cfg.trajectory()), tmp_path,
         {"scope": "sweeps/s/trial-1"}),
    ]  # fmt: skip
    # Without a checkpoint_uri the training keeps its checkpoints on local disk only.
    assert train._checkpoint_store(config_from_dict({})) is None and len(opened) == 1
