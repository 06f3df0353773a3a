"""The TabM-mini ensemble head of the built-in model (Gorishniy et al., ICLR 2025, *TabM*;
trainer_module/model.py's docstring): k members share the hidden layers, each scales their input
by its own vector and has its own output layer; every member's outputs in training, their mean in
inference. Dropout between the shared layers is keyed on the row and the step
(trainer_module/row_dropout.py), so N replicas still make one device's update."""

from __future__ import annotations

import tensorflow as tf

from trainer_module import row_dropout, settings
from trainer_module.autograph_rules import plain


@plain  # traced as written: trainer_module/autograph_rules.py
def ensemble_mean(outputs: tf.Tensor, task: str) -> tf.Tensor:
    """[batch, outputs] from the members' [batch, k, outputs], in float32: the mean of their
    probabilities as log-probabilities (classification), or the mean of their values."""
    outputs = tf.cast(outputs, tf.float32)
    if task == settings.REGRESSION:
        return tf.reduce_mean(outputs, axis=1)
    k = tf.cast(tf.shape(outputs)[1], tf.float32)
    return tf.reduce_logsumexp(tf.nn.log_softmax(outputs), axis=1) - tf.math.log(k)


@tf.keras.utils.register_keras_serializable(package="lockstep")
class EnsembleHead(tf.keras.layers.Layer):
    """TabM-mini: [batch, features] -> k members' [batch, k, outputs] in training (each member's
    input scaled by its own vector, the hidden layers shared, an output layer each), their mean
    (`ensemble_mean`, float32) in inference."""

    def __init__(self, members: int, hidden_units, outputs: int, task: str, dropout: float = 0.0,
                 l2: float = 0.0, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.members, self.hidden_units = members, list(hidden_units)
        self.outputs, self.task, self.dropout, self.seed = outputs, task, dropout, seed
        self.l2 = l2

    def build(self, input_shape):
        if isinstance(input_shape[0], (list, tuple, tf.TensorShape)):  # [x's, the keys']
            input_shape = input_shape[0]
        width = int(tf.TensorShape(input_shape)[-1])
        uniform = tf.keras.initializers.RandomUniform(-1.0, 1.0, seed=self.seed)
        self.scale = self.add_weight(  # random signs: the members start apart
            "scale", [self.members, width], initializer=lambda shape, dtype=None: tf.where(
                uniform(shape, dtype) >= 0, 1.0, -1.0))
        reg = tf.keras.regularizers.l2(self.l2) if self.l2 else None
        self.hidden = [tf.keras.layers.Dense(units, activation="relu", name=f"dense_{i}",
                                             kernel_regularizer=reg,
                                             kernel_initializer=tf.keras.initializers.GlorotUniform(
                                                 seed=self.seed + 1 + i))
                       for i, units in enumerate(self.hidden_units)]
        self.drop = [row_dropout.RowDropout(self.dropout, salt=self.seed + 50 + i)
                     for i in range(len(self.hidden_units))]
        last = self.hidden_units[-1] if self.hidden_units else width
        bound = last ** -0.5
        init = tf.keras.initializers.RandomUniform(-bound, bound, seed=self.seed + 100)
        self.kernel = self.add_weight("head_kernel", [self.members, last, self.outputs],
                                      initializer=init)
        self.bias = self.add_weight("head_bias", [self.members, self.outputs], initializer=init)
        for layer, units in zip(self.hidden, [width] + self.hidden_units):
            # Under its own name ("ensemble/dense_0/kernel:0"): else every hidden layer's weights
            # are "ensemble/kernel:0", and what reads weights by name (export.WEIGHTS, a warm
            # start) takes one layer's for another's.
            with tf.name_scope(layer.name):
                layer.build([None, self.members, units])

    @plain  # training is a Python bool here (Keras traces each value apart)
    def call(self, x, training=None):
        """x: [batch, features], or [x, its rows' keys] (row_dropout.row_key) with dropout."""
        x, key = x if isinstance(x, (list, tuple)) else (x, None)
        h = x[:, None, :] * tf.cast(self.scale, x.dtype)  # [batch, k, features]
        for dense, drop in zip(self.hidden, self.drop):
            h = drop([dense(h), key], training=training)
        out = tf.einsum("bkh,kho->bko", h, tf.cast(self.kernel, h.dtype)) + tf.cast(self.bias,
                                                                                    h.dtype)
        if training:
            return tf.cast(out, tf.float32)
        return ensemble_mean(out, self.task)

    def get_config(self):
        return {**super().get_config(), "members": self.members,
                "hidden_units": self.hidden_units, "outputs": self.outputs, "task": self.task,
                "dropout": self.dropout, "l2": self.l2, "seed": self.seed}
