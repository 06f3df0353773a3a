"""A raw column as tf.Transform gives it to preprocessing_fn: a dense [batch] or [batch, 1]
tensor, or a SparseTensor [batch, 1] where the schema lets a cell be missing (the inferred schema
fixes no shape). Its cells dense, which of them are present, its values as floats."""

from __future__ import annotations

import tensorflow as tf


def dense(x, default):
    """[batch] tensor from a dense [batch, 1] / [batch] or sparse [batch, None] input."""
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(
            tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value=default)
    if x.shape.rank == 2:
        x = tf.squeeze(x, axis=1)
    return x


def present(x):
    if isinstance(x, tf.SparseTensor):
        ones = tf.SparseTensor(x.indices, tf.ones_like(x.values, tf.float32), [x.dense_shape[0], 1])
        return tf.squeeze(tf.sparse.to_dense(ones), axis=1)
    return tf.ones([tf.shape(x)[0]], tf.float32)


def as_float(x):
    if isinstance(x, tf.SparseTensor):
        return tf.SparseTensor(x.indices, tf.cast(x.values, tf.float32), x.dense_shape)
    return tf.cast(x, tf.float32)
