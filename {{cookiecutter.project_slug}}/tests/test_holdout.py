"""The held-out set promote measures on (registry.holdout): checked when the config loads, and the packaged
digits' case, the default branch's own test split. Promote reading an S3 holdout is in tests/test_promote.py."""

from __future__ import annotations

import pytest

from {{ cookiecutter.package_name }} import holdout
from {{ cookiecutter.package_name }}.config import Config, ConfigError, config_from_dict
from {{ cookiecutter.package_name }}.errors import DataError


@pytest.mark.parametrize(
    "value", ["s3://bucket/data/x/", "images/holdout", "s3://bucket/holdoutx/", "s3:///holdout/x/", ""]
)
def test_a_holdout_outside_the_holdout_prefix_is_refused_with_the_field_and_the_fix(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"registry": {"holdout": value}}, "train.yaml")
    assert "  registry.holdout: must be 'digits' or an image folder s3://<bucket>/holdout/<folder>/" in str(
        info.value
    )


def test_an_image_folder_under_holdout_is_accepted() -> None:
    assert config_from_dict({"registry": {"holdout": "s3://team-1/holdout/v2/"}}).registry.holdout


def test_digits_are_held_out_by_the_default_branchs_own_split() -> None:
    held = holdout.load(Config())
    assert len(held.labels) == 270 and held.images((8, 8, 1)).shape == (270, 8, 8, 1)
    assert held.images((16, 16, 3)).shape == (270, 16, 16, 3)  # any model's input shape
    # Another seed (or other fractions) in the default branch's config holds out other images.
    assert holdout.load(config_from_dict({"training": {"seed": 7}})).labels != held.labels
    with pytest.raises(DataError, match="4 channels is not an image model's"):
        held.images((8, 8, 4))


def test_digits_cannot_hold_out_for_a_project_that_trains_on_other_data() -> None:
    with pytest.raises(
        DataError, match=r"registry.holdout 'digits' .* set registry.holdout to s3://<bucket>/holdout/"
    ):
        holdout.load(config_from_dict({"data": {"source": "s3://team/data/"}}))
