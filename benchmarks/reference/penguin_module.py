"""The reference Trainer/Transform module, written the way the TFX penguin tutorials do it:
a module_file with preprocessing_fn and run_fn, Keras model.fit under MirroredStrategy. The
module_file of reference/pipeline.py, which compile_time.py compiles (a compile does not run it).
Stock TFX runs end to end in whole_run.py, with reference/tabular_module.py."""

import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx
from tfx_bsl.public import tfxio

from stock import fit_and_export

NUMERIC = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "year"]
LABEL = "species"


def _dense(x, default):
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default)
    return tf.squeeze(x, axis=1) if x.shape.rank == 2 else x


def preprocessing_fn(inputs):
    out = {}
    for key in NUMERIC:
        out[key] = tft.scale_to_z_score(tf.cast(_dense(inputs[key], 0), tf.float32))
    out[LABEL] = tft.compute_and_apply_vocabulary(_dense(inputs[LABEL], ""), vocab_filename="label")
    return out


def _input_fn(file_pattern, data_accessor, tf_transform_output, batch_size):
    return data_accessor.tf_dataset_factory(
        file_pattern, tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=LABEL),
        tf_transform_output.transformed_metadata.schema).repeat()


def run_fn(fn_args: tfx.components.FnArgs):
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    strategy = tf.distribute.MirroredStrategy()
    train = _input_fn(fn_args.train_files, fn_args.data_accessor, tf_transform_output, 32)
    evaluation = _input_fn(fn_args.eval_files, fn_args.data_accessor, tf_transform_output, 32)
    fit_and_export(strategy, _build_model, fn_args, train, evaluation, tf_transform_output, LABEL,
                   lambda transformed: {k: tf.reshape(transformed[k], [-1, 1]) for k in NUMERIC})


def _build_model():
    inputs = [tf.keras.Input(shape=(1,), name=k) for k in NUMERIC]
    x = tf.keras.layers.concatenate(inputs)
    for units in (32, 16):
        x = tf.keras.layers.Dense(units, activation="relu")(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(3)(x))
