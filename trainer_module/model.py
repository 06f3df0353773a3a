"""The built-in Keras model and loss. The model is built from the transformed features: z-scored numerics and missing flags go in
as they are, vocabulary indices through small embeddings; dense layers with L2 regularization."""

from __future__ import annotations

import tensorflow as tf

from trainer_module import settings


def mlp(numeric: list[str], categorical: dict[str, int], outputs: int,
                hidden_units=(32, 16), l2: float = 1e-4, embedding_dim: int = 4,
                seed: int = 0) -> tf.keras.Model:
    """outputs: number of classes (logits), or 1 for regression."""
    init = lambda i: tf.keras.initializers.GlorotUniform(seed=seed + i)  # noqa: E731
    reg = tf.keras.regularizers.l2(l2) if l2 else None
    inputs, parts = {}, []
    for key in numeric:
        inputs[key] = tf.keras.Input(shape=(), name=key, dtype=tf.float32)
    if numeric:  # one [batch, n] stack, not a layer per column: width costs little to trace and save
        parts.append(tf.stack([inputs[key] for key in numeric], axis=1))
    for i, (key, size) in enumerate(sorted(categorical.items())):
        inputs[key] = tf.keras.Input(shape=(), name=key, dtype=tf.int64)
        embedded = tf.keras.layers.Embedding(
            size, embedding_dim, embeddings_initializer=init(100 + i), name=f"embed_{key}")(inputs[key])
        parts.append(embedded)
    x = parts[0] if len(parts) == 1 else tf.keras.layers.Concatenate()(parts)
    for i, units in enumerate(hidden_units):
        x = tf.keras.layers.Dense(units, activation="relu", kernel_initializer=init(i),
                                  kernel_regularizer=reg, name=f"dense_{i}")(x)
    out = tf.keras.layers.Dense(outputs, kernel_initializer=init(len(hidden_units)),
                                kernel_regularizer=reg, name="logits",
                                dtype="float32")(x)  # float32 outputs under mixed precision too
    return tf.keras.Model(inputs, out)


def builtin_loss(task: str):
    """Per-example losses (reduction NONE): the trainer divides by the *global* batch itself."""
    if task == settings.REGRESSION:
        mse = tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.NONE)
        return lambda labels, outputs: mse(tf.reshape(labels, [-1, 1]), outputs)
    xent = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    return xent
