from pathlib import Path

import boto3
import numpy as np
import pytest
from gpu_runner_testing.s3_objects import upload_folder
from PIL import Image

from {{ cookiecutter.package_name }}.config import DataConfig
from {{ cookiecutter.package_name }}.data import load_images, load_splits
from {{ cookiecutter.package_name }}.errors import DataError


def write_image_folder(root: Path, classes: int = 3, per_class: int = 10, size: int = 12) -> Path:
    """Class k is an image whose brightness is k/classes, plus noise: learnable and quick to make."""
    rng = np.random.default_rng(0)
    for label in range(classes):
        folder = root / f"class_{label}"
        folder.mkdir(parents=True)
        for index in range(per_class):
            pixels = np.clip(label / classes + rng.normal(0, 0.05, (size, size)), 0, 1) * 255
            Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{index}.png")
    return root


def test_digits_shapes_and_range() -> None:
    images, labels, names = load_images(DataConfig())
    assert images.shape == (1797, 8, 8, 1)
    assert images.dtype == np.float32
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert names == tuple(str(d) for d in range(10))
    assert set(np.unique(labels)) == set(range(10))


def test_digits_resized_to_rgb() -> None:
    images, _, _ = load_images(DataConfig(image_size=(16, 12), channels=3))
    assert images.shape == (1797, 16, 12, 3)


def test_split_is_stratified_and_seeded() -> None:
    cfg = DataConfig()
    first, second, other = load_splits(cfg, seed=1), load_splits(cfg, seed=1), load_splits(cfg, seed=2)
    assert np.array_equal(first.y_test, second.y_test)
    assert not np.array_equal(first.y_test, other.y_test)
    total = len(first.y_train) + len(first.y_val) + len(first.y_test)
    assert total == 1797
    assert len(first.y_test) == pytest.approx(0.15 * 1797, abs=2)
    # Stratified: every class is in every split.
    for labels in (first.y_train, first.y_val, first.y_test):
        assert set(np.unique(labels)) == set(range(10))


def test_image_folder(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images")
    images, labels, names = load_images(DataConfig(source=str(root), image_size=(10, 10)))
    assert images.shape == (30, 10, 10, 1)
    assert names == ("class_0", "class_1", "class_2")
    assert np.bincount(labels).tolist() == [10, 10, 10]
    # Brightness ordering survives loading: the data really is what was written.
    means = [images[labels == k].mean() for k in range(3)]
    assert means == sorted(means)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="folder does not exist"):
        load_images(DataConfig(source=str(tmp_path / "nope")))


def test_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"found 0 class sub-folder\(s\)"):
        load_images(DataConfig(source=str(tmp_path / "empty")))


def test_class_without_images(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", classes=2)
    (root / "class_9").mkdir()
    with pytest.raises(DataError, match="class_9' has no images"):
        load_images(DataConfig(source=str(root)))


def test_corrupt_image_is_named(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", classes=2)
    bad = root / "class_1" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    with pytest.raises(DataError) as info:
        load_images(DataConfig(source=str(root)))
    assert str(bad) in str(info.value)
    assert "not a readable image" in str(info.value)


def test_too_few_images_to_split(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", classes=2, per_class=2)
    with pytest.raises(DataError, match="add images to the smallest classes"):
        load_splits(DataConfig(source=str(root)), seed=0)


def test_s3_source_trains_like_a_folder(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boto3.client("s3").create_bucket(Bucket="data-load")
    upload_folder("data-load", "imgs", write_image_folder(tmp_path / "src"))
    images, _, names = load_images(
        DataConfig(source="s3://data-load/imgs", cache_dir=tmp_path / "cache", image_size=(12, 12))
    )
    assert images.shape == (30, 12, 12, 1)
    assert names == ("class_0", "class_1", "class_2")


def test_s3_missing_prefix(moto_endpoint: str, tmp_path: Path) -> None:
    boto3.client("s3").create_bucket(Bucket="data-empty")
    with pytest.raises(DataError, match="no objects under this prefix"):
        load_images(DataConfig(source="s3://data-empty/nothing/here", cache_dir=tmp_path))
