"""The reference Trainer/Transform module for any tabular CSV, written the way the TFX tutorials do
it (a module_file with preprocessing_fn and run_fn, Keras model.fit under MirroredStrategy), with
the shape of lockstep's built-in model: numerics stacked, an embedding of 4 per string column,
Dense 32 and 16 relu, logits; Adam.

The columns come from a JSON file, {"numeric": [...], "string": [...], "label": "..."}, whose path
is custom_config["columns"]; custom_config["batch_size"] is the training batch."""

import json
import re

import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx
from tfx_bsl.public import tfxio

from stock import fit_and_export


def _columns(custom_config):
    with open(custom_config["columns"]) as f:
        return json.load(f)


def _name(column):
    """A transformed feature's name (a Keras input, a vocabulary file): the column's, made safe."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", column)


def _dense(x, default):
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default)
    return tf.squeeze(x, axis=1) if x.shape.rank == 2 else x


def preprocessing_fn(inputs, custom_config):
    columns = _columns(custom_config)
    out = {}
    for key in columns["numeric"]:
        out[_name(key)] = tft.scale_to_z_score(tf.cast(_dense(inputs[key], 0), tf.float32))
    for key in columns["string"]:
        out[_name(key)] = tft.compute_and_apply_vocabulary(
            _dense(inputs[key], ""), num_oov_buckets=1, vocab_filename=_name(key))
    label = inputs[columns["label"]]
    out[columns["label"]] = tft.compute_and_apply_vocabulary(
        _dense(label, "" if label.dtype == tf.string else 0), vocab_filename="label")
    return out


def _input_fn(file_pattern, data_accessor, tf_transform_output, batch_size, label):
    return data_accessor.tf_dataset_factory(
        file_pattern, tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=label),
        tf_transform_output.transformed_metadata.schema).repeat()


def _build_model(numeric, vocabularies, classes):
    inputs = {k: tf.keras.Input(shape=(), name=k, dtype=tf.float32) for k in numeric}
    parts = [tf.stack([inputs[k] for k in numeric], axis=1)] if numeric else []
    for key, size in vocabularies.items():
        inputs[key] = tf.keras.Input(shape=(), name=key, dtype=tf.int64)
        parts.append(tf.keras.layers.Embedding(size, 4)(inputs[key]))
    x = parts[0] if len(parts) == 1 else tf.keras.layers.Concatenate()(parts)
    for units in (32, 16):
        x = tf.keras.layers.Dense(units, activation="relu")(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(classes)(x))


def run_fn(fn_args: tfx.components.FnArgs):
    columns = _columns(fn_args.custom_config)
    label, batch_size = columns["label"], fn_args.custom_config["batch_size"]
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    strategy = tf.distribute.MirroredStrategy()
    train = _input_fn(fn_args.train_files, fn_args.data_accessor, tf_transform_output, batch_size,
                      label)
    evaluation = _input_fn(fn_args.eval_files, fn_args.data_accessor, tf_transform_output,
                           batch_size, label)
    numeric = [_name(k) for k in columns["numeric"]]
    vocabularies = {_name(k): tf_transform_output.vocabulary_size_by_name(_name(k)) + 1
                    for k in columns["string"]}
    classes = tf_transform_output.vocabulary_size_by_name("label")
    fit_and_export(strategy, lambda: _build_model(numeric, vocabularies, classes), fn_args, train,
                   evaluation, tf_transform_output, label,
                   lambda transformed: {k: transformed[k] for k in [*numeric, *vocabularies]})
