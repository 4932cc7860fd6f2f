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


def shard_by_element(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """For multi-worker training: each worker keeps its share of the elements (AutoShardPolicy.DATA).

    The default, AUTO, tries to give each worker its own input files first; these datasets are arrays in memory,
    with no files to split, so DATA says so at once. DATA needs every worker to produce the same elements in the
    same order: the arrays and the seeded shuffle are the same on every worker
    (https://www.tensorflow.org/api_docs/python/tf/data/experimental/AutoShardPolicy)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)
