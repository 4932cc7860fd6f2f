"""tf.data input pipelines: the model never waits for data."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def make_dataset(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    *,
    training: bool,
    seed: int,
    shuffle_buffer: int = 2048,
) -> tf.data.Dataset:
    """from_tensor_slices -> cache -> (shuffle) -> batch -> prefetch(AUTOTUNE).

    Cache comes before shuffle so every epoch reshuffles the cached elements; with a fixed seed the order of
    every epoch is reproducible.
    """
    dataset = tf.data.Dataset.from_tensor_slices((images.astype(np.float32), labels.astype(np.int32))).cache()
    if training:
        buffer = min(shuffle_buffer, len(labels))
        dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
