"""Dropout that any replica layout draws alike: a row's mask is a hash of the row, the global step
and the unit, not a draw of a replica's random generator.

Keras' Dropout draws from a generator of each replica's own: on N replicas each draws its own
masks, so N replicas did not make one device's update, and `lockstep verify` failed with
trainer.dropout above 0. Here a row's mask is a function of what the row is (a hash of the bits of
its inputs, `row_key`), of when it is trained (the optimizer's step, `attach`: one value for the
K micro-batches of an accumulated step, as for one device's whole batch) and of the unit it
drops: the same row in the same step gets the same mask on any replica, in any process, as on one
device (tests/test_equivalence.py at 2 and 4 replicas, tables split over them, accumulation).
Two identical rows of one step share a mask. Inverted dropout: a kept unit is scaled by
1 / (1 - rate) in training; inference is the identity.

The built-in model (trainer_module/model.py) drops with it in two places:
- trainer.dropout: a unit of a member's hidden layer, between the ensemble's shared layers;
- trainer.column_dropout: a whole column's numeric embedding, or a whole text or code column's
  embedding row (`block`: the units dropped together), for a row: the model learns to do without
  any one column, a regularizer for tables whose signal is spread thin over many noisy columns
  (docs/training.md, "Whole-column dropout").

The hash is murmur3's 32-bit finalizer over int64 tensors held below 2**32 (its products taken
in 16-bit halves, so none overflows): vectorized over rows and units, no per-row Python, the same
bits on any device."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from trainer_module.autograph_rules import plain

_LOW = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9  # 2**32 / the golden ratio: consecutive indices spread over 32 bits
_UNIT_BITS = 24  # a draw's uniform value in [0, 1) has this many bits


def _times(x: tf.Tensor, c: int) -> tf.Tensor:
    """x * c mod 2**32 for int64 x in [0, 2**32), in 16-bit halves: no product passes 2**49."""
    low, high = tf.bitwise.bitwise_and(x, 0xFFFF), tf.bitwise.right_shift(x, 16)
    return tf.bitwise.bitwise_and(
        low * c + tf.bitwise.left_shift(high * (c & 0xFFFF), 16), _LOW)


def _mix(x: tf.Tensor) -> tf.Tensor:
    """murmur3's fmix32 on int64 values in [0, 2**32): each input bit moves half the output's."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = _times(x, 0x85EBCA6B)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 13))
    x = _times(x, 0xC2B2AE35)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def _salts(n: int, offset: int = 0) -> tf.Tensor:
    """[n] int64: a distinct 32-bit salt for each of n positions."""
    return tf.constant((np.arange(n, dtype=np.int64) + 1 + offset) * _GOLDEN & _LOW, tf.int64)


def _bits(t: tf.Tensor) -> tf.Tensor:
    """[batch, w] int64 in [0, 2**32): a float's bits, an integer's low 32 bits."""
    t = tf.reshape(t, [-1, int(np.prod(t.shape[1:]))])  # the width static, as the inputs'
    if t.dtype.is_floating:
        t = tf.bitcast(tf.cast(t, tf.float32), tf.int32)
    return tf.bitwise.bitwise_and(tf.cast(t, tf.int64), _LOW)


@plain
def row_key(columns: list) -> tf.Tensor:
    """[batch] int64: a hash of a row's values in `columns` (tensors [batch] or [batch, w], ints
    or floats): the same row, the same key, in any batch, on any replica."""
    bits = tf.concat([_bits(c) for c in columns], axis=1)
    mixed = _mix(tf.bitwise.bitwise_and(bits + _salts(int(bits.shape[1])), _LOW))
    return _mix(tf.bitwise.bitwise_and(tf.reduce_sum(mixed, axis=1), _LOW))


def keep_mask(key: tf.Tensor, step: tf.Tensor, salt: int, units: int, rate: float) -> tf.Tensor:
    """[batch, units] bool: each row's units kept in this step, each with probability 1 - rate."""
    when = _mix(tf.bitwise.bitwise_and(_times(tf.cast(step, tf.int64), _GOLDEN) + salt, _LOW))
    base = _mix(tf.bitwise.bitwise_and(key + when, _LOW))
    drawn = _mix(tf.bitwise.bitwise_xor(base[:, None], _salts(units, offset=salt)[None, :]))
    return tf.bitwise.right_shift(drawn, 32 - _UNIT_BITS) >= int(round(rate * (1 << _UNIT_BITS)))


class UnattachedDropout(RuntimeError):
    """A RowDropout called in training with no step to key its masks on (`attach`)."""


@tf.keras.utils.register_keras_serializable(package="lockstep")
class RowDropout(tf.keras.layers.Layer):
    """[x [batch, ..., n x block], key [batch]] -> x, each row's units dropped in training (in
    blocks of `block` consecutive units of the last axis: a column's embedding) by its key and
    the step (the module's docstring). `salt` tells this layer's masks from another's."""

    def __init__(self, rate: float, block: int = 1, salt: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.rate, self.block, self.salt = float(rate), int(block), int(salt)

    @plain  # training is a Python bool here (Keras traces each value apart)
    def call(self, inputs, training=None):
        x, key = inputs
        if not training or not self.rate:
            return x
        clock = getattr(self, "_clock", None)
        if clock is None:
            raise UnattachedDropout(f"{self.name}: trained with no step to draw its masks by "
                                    "(trainer_module/row_dropout.py: attach the optimizer)")
        units = int(np.prod(x.shape[1:])) // self.block
        kept = tf.cast(keep_mask(key, clock, self.salt, units, self.rate), x.dtype)
        kept = tf.reshape(tf.repeat(kept, self.block, axis=1), tf.shape(x))
        return x * kept * tf.cast(1.0 / (1.0 - self.rate), x.dtype)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "block": self.block,
                "salt": self.salt}


def attach(model: tf.keras.Model, optimizer) -> None:
    """Key the masks of `model`'s RowDropout layers on `optimizer`'s step (its `iterations`: one
    value over a global step's micro-batches, on every replica). Held outside Keras' tracking,
    so the step is no weight of the model."""
    for layer in model.submodules:
        if isinstance(layer, RowDropout):
            object.__setattr__(layer, "_clock", optimizer.iterations)
