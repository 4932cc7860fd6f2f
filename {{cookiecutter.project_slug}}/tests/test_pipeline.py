import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.pipeline import make_dataset


def epoch_labels(dataset: tf.data.Dataset) -> list[int]:
    return [int(v) for _, labels in dataset for v in labels.numpy()]


def sample_data(n: int = 100) -> tuple[np.ndarray, np.ndarray]:
    images = np.arange(n * 4 * 4, dtype=np.float32).reshape(n, 4, 4, 1)
    return images, np.arange(n, dtype=np.int32)


def test_batches_have_the_expected_shapes_and_types() -> None:
    images, labels = sample_data(100)
    dataset = make_dataset(images, labels, 32, training=True, seed=0)
    batches = list(dataset)
    assert [int(x.shape[0]) for x, _ in batches] == [32, 32, 32, 4]
    x, y = batches[0]
    assert x.shape[1:] == (4, 4, 1) and x.dtype == tf.float32 and y.dtype == tf.int32


def test_training_order_is_seeded_and_reshuffled_every_epoch() -> None:
    images, labels = sample_data()
    first = make_dataset(images, labels, 10, training=True, seed=7)
    second = make_dataset(images, labels, 10, training=True, seed=7)
    epoch_one, epoch_two = epoch_labels(first), epoch_labels(first)
    assert epoch_one == epoch_labels(second)
    assert epoch_one != epoch_two
    assert sorted(epoch_one) == list(range(100))
    assert epoch_one != list(range(100))


def test_evaluation_order_is_stable() -> None:
    images, labels = sample_data()
    assert epoch_labels(make_dataset(images, labels, 16, training=False, seed=1)) == list(range(100))


def test_images_survive_the_pipeline_unchanged() -> None:
    images, labels = sample_data(10)
    x, y = next(iter(make_dataset(images, labels, 10, training=False, seed=0)))
    assert np.array_equal(x.numpy(), images)
    assert np.array_equal(y.numpy(), labels)
