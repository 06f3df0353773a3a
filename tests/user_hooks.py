"""A user's model and loss hooks, for tests/test_verify.py: set by dotted path,
`TrainerConfig(model="user_hooks:bn_model", loss="user_hooks:per_replica_mean_loss")`
(tests/ is on sys.path under pytest; put it on PYTHONPATH for a subprocess)."""

import tensorflow as tf

_xent = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


def per_replica_mean_loss(labels, outputs):
    """Per-example cross-entropy divided by its own batch size: the right shape, [batch], but on
    a replica that batch is the per-replica batch, so the update is N replicas times too large."""
    return _xent(labels, outputs) / tf.cast(tf.shape(labels)[0], tf.float32)


def _model(inputs, batch_norm):
    features, parts = {}, []
    for key in inputs.numeric:
        features[key] = tf.keras.Input(shape=(), name=key, dtype=tf.float32)
        parts.append(tf.keras.layers.Reshape((1,))(features[key]))
    for key, size in inputs.categorical.items():
        features[key] = tf.keras.Input(shape=(), name=key, dtype=tf.int64)
        parts.append(tf.keras.layers.Embedding(size, 4)(features[key]))
    x = tf.keras.layers.Concatenate()(parts)
    x = tf.keras.layers.Dense(16, activation="relu")(x)
    x = batch_norm(x)
    outputs = tf.keras.layers.Dense(inputs.outputs)(x)
    return tf.keras.Model(features, outputs)


def bn_model(inputs):
    """BatchNormalization as it comes: each replica normalizes with its own batch's statistics."""
    return _model(inputs, tf.keras.layers.BatchNormalization())


def synchronized_bn_model(inputs):
    """BatchNormalization(synchronized=True): the statistics of the whole global batch."""
    return _model(inputs, tf.keras.layers.BatchNormalization(synchronized=True))
