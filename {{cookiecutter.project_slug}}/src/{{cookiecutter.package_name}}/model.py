"""A small convolutional classifier that fits 8x8 digits as well as larger images."""

from __future__ import annotations

import tensorflow as tf

from .config import ModelConfig


def build_model(input_shape: tuple[int, int, int], num_classes: int, cfg: ModelConfig) -> tf.keras.Model:
    inputs = tf.keras.Input(shape=input_shape, name="image")
    x = inputs
    for index, filters in enumerate(cfg.filters):
        x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{index}")(x)
        x = tf.keras.layers.BatchNormalization(name=f"bn{index}", momentum=0.9)(x)
        # Pool only while the feature map is at least 4 pixels wide, so tiny inputs keep some spatial extent.
        if min(x.shape[1], x.shape[2]) >= 4:
            x = tf.keras.layers.MaxPooling2D(name=f"pool{index}")(x)
    x = tf.keras.layers.Flatten(name="flatten")(x)
    x = tf.keras.layers.Dropout(cfg.dropout, name="dropout")(x)
    x = tf.keras.layers.Dense(cfg.dense_units, activation="relu", name="dense")(x)
    # float32 output keeps softmax numerically stable under the mixed_float16 policy.
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(
        x
    )
    return tf.keras.Model(inputs, outputs, name="cnn")
