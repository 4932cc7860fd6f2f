"""Which checkpoint a training restores is decided by its config: the fields that change the trajectory, and where
the checkpoints go. The S3 mirror itself (the platform's gpu_job.checkpoints) is tested in the template repository
(platform/tests/job/test_checkpoints.py); the Keras callback that pushes during fit() in test_callbacks.py."""

import pytest
from gpu_job.checkpoints import config_hash

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
