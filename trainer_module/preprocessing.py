"""preprocessing_fn for tf.Transform: generic over any CSV, driven by the inferred schema's types.

- numeric feature x: `x_xf` = z-score with missing filled by the mean (so 0), and `x_missing` 0/1;
  all numeric columns go through one [batch, n] matrix, so their analyzers are one per statistic,
  not one per column;
- string feature s: `s_xf` = vocabulary index with OOV buckets, missing mapped to its own token;
- label, by the task decided before the run (custom_config, trainer_module/config.py):
  classification gives classes as a vocabulary index (string or integer labels; -1 when
  missing); regression gives the value as a float (NaN when missing), integer labels too.
  Rows without a label are dropped in training.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import features
from trainer_module.config import REGRESSION, TransformSpec


def _dense(x, default):
    """[batch] tensor from a dense [batch, 1] / [batch] or sparse [batch, None] input."""
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(
            tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value=default)
    if x.shape.rank == 2:
        x = tf.squeeze(x, axis=1)
    return x


def _present(x):
    if isinstance(x, tf.SparseTensor):
        ones = tf.SparseTensor(x.indices, tf.ones_like(x.values, tf.float32), [x.dense_shape[0], 1])
        return tf.squeeze(tf.sparse.to_dense(ones), axis=1)
    return tf.ones([tf.shape(x)[0]], tf.float32)


def _as_float(x):
    if isinstance(x, tf.SparseTensor):
        return tf.SparseTensor(x.indices, tf.cast(x.values, tf.float32), x.dense_shape)
    return tf.cast(x, tf.float32)


def preprocessing_fn(inputs, custom_config):
    spec = TransformSpec.from_custom_config(custom_config)
    label = spec.label
    if label not in inputs:
        raise ValueError(f"label column '{label}' is not among the features: {sorted(inputs)}")
    outputs = {}
    numeric = []
    for key, x in inputs.items():
        if key == label:
            continue
        if x.dtype == tf.string:
            value = _dense(x, features.MISSING_TOKEN)
            outputs[features.transformed_name(key)] = tft.compute_and_apply_vocabulary(
                value, num_oov_buckets=features.OOV_BUCKETS, vocab_filename=features.vocab_name(key))
        else:
            numeric.append(key)
    if numeric:
        # All numeric columns as one [batch, n] matrix: one set of analyzers for them all, not
        # one per column (Transform's time goes into tracing and planning each analyzer).
        present = tf.stack([_present(inputs[k]) for k in numeric], axis=1)
        values = tf.stack([tf.cast(_dense(inputs[k], 0), tf.float32) for k in numeric], axis=1)
        wide = tf.cast(values * present, tf.float64)
        mean = tf.cast(tft.sum(wide, reduce_instance_dims=False)
                       / tf.maximum(tft.sum(tf.cast(present, tf.float64),
                                            reduce_instance_dims=False), 1.0), tf.float32)
        filled = present * values + (1.0 - present) * mean
        scaled = tft.scale_to_z_score(filled, elementwise=True)
        for index, key in enumerate(numeric):
            outputs[features.transformed_name(key)] = scaled[:, index]
            outputs[features.missing_flag_name(key)] = 1.0 - present[:, index]

    y = inputs[label]
    if spec.task == REGRESSION:
        if y.dtype == tf.string:
            raise ValueError(f"label column '{label}' holds text: a regression needs numbers")
        outputs[features.transformed_name(label)] = _dense(_as_float(y), float("nan"))
    else:
        present_values = y.values if isinstance(y, tf.SparseTensor) else y
        if y.dtype != tf.string:
            present_values = tf.strings.as_string(present_values)
        dense = _dense(y, "" if y.dtype == tf.string else 0)
        if y.dtype != tf.string:
            dense = tf.where(_present(y) > 0, tf.strings.as_string(dense), "")
        # The vocabulary sees present labels only, so "missing" never becomes a class.
        vocab = tft.vocabulary(present_values, vocab_filename=features.LABEL_VOCAB)
        outputs[features.transformed_name(label)] = tft.apply_vocabulary(
            dense, vocab, default_value=-1)
    return outputs
