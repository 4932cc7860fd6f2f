"""Settings refuse what would let someone else choose the bytes a GPU instance runs (issue 13, item 8): a container
image by tag alone, a pinned runner without its SHA-256, a runner mirror without a pin or outside runner-mirror/
(the prefix the runner role cannot write)."""

from __future__ import annotations

import pytest

from gpu_runner.core.errors import SettingsError
from gpu_runner.core.settings import Settings

SHA = "a" * 64
DIGEST = "sha256:" + "0" * 64


def settings(**values: object) -> Settings:
    return Settings(project="demo", region="eu-west-1", instance_types=("g4dn.xlarge",), **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "image",
    ["", f"tensorflow/tensorflow:2.15.0-gpu@{DIGEST}", f"nvcr.io/nvidia/tensorflow@{DIGEST}",
     f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/tf:2.15@{DIGEST}"],
)  # fmt: skip
def test_an_image_pinned_by_digest_or_host_mode_is_accepted(image: str) -> None:
    assert settings(image=image).image == image


@pytest.mark.parametrize(
    "image",
    ["tensorflow/tensorflow:2.15.0-gpu", "tensorflow/tensorflow:latest", f"tensorflow/tensorflow@sha256:{'0' * 63}",
     f"tensorflow/tensorflow:2.15.0-gpu@sha512:{'0' * 128}", f"tf:2.15 $(reboot)@{DIGEST}"],
    ids=["tag-only", "latest", "short-digest", "other-algorithm", "hostile"],
)  # fmt: skip
def test_an_image_without_a_digest_is_refused(image: str) -> None:
    with pytest.raises(
        SettingsError, match=r"image: .* is not pinned by digest; use <name>:<tag>@sha256:"
    ) as error:
        settings(image=image)
    assert "docker buildx imagetools inspect" in str(error.value), "the message names the refresh command"


def test_a_pinned_runner_needs_its_sha256() -> None:
    with pytest.raises(
        SettingsError, match=r"runner_sha256: a pinned runner_version \(2.330.0\) needs its SHA-256"
    ):
        settings(runner_version="2.330.0")
    assert settings(runner_version="2.330.0", runner_sha256=SHA).runner_sha256 == SHA
    # "latest" takes the digest GitHub publishes with the release; the boot script refuses a release without one.
    assert settings().runner_version == "latest"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"runner_mirror": "s3://ml-bucket/runner-mirror"}, "needs a pinned runner_version and its runner_sha256"),
        ({"runner_mirror": "s3://ml-bucket/runner-mirror", "runner_version": "2.330.0"}, "needs its SHA-256"),
        ({"runner_mirror": "s3://ml-bucket/actions", "runner_version": "2.330.0", "runner_sha256": SHA},
         "must be s3://<bucket>/runner-mirror"),
        ({"runner_mirror": "https://mirror.example/runner-mirror", "runner_version": "2.330.0",
          "runner_sha256": SHA}, "must be s3://<bucket>/runner-mirror"),
    ],
    ids=["latest", "no-sha", "writable-prefix", "not-s3"],
)  # fmt: skip
def test_a_mirror_needs_a_pin_a_sha256_and_the_read_only_prefix(values: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        settings(**values)


def test_a_pinned_mirror_under_the_read_only_prefix_is_accepted() -> None:
    for mirror in (
        "s3://ml-bucket/runner-mirror",
        "s3://ml-bucket/runner-mirror/",
        "s3://ml-bucket/runner-mirror/x",
    ):
        assert (
            settings(runner_mirror=mirror, runner_version="2.330.0", runner_sha256=SHA).runner_mirror
            == mirror
        )
