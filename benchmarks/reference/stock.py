"""What the two reference pipelines share, written as the TFX tutorials do: the Resolver, Evaluator
and Pusher after the Trainer, and the export with `serving_default` and `transform_features`
(imported by the pipelines and their module files: this directory is on sys.path when a pipeline
runs as a script)."""

import os

import tensorflow as tf
import tensorflow_model_analysis as tfma
from tfx import v1 as tfx


def evaluate_and_push(example_gen, trainer, label: str, lower_bound: float, root: str) -> list:
    """[Resolver, Evaluator, Pusher]: the latest blessed model as the baseline, accuracy at least
    lower_bound to bless, a push to <root>/serving."""
    resolver = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")
    eval_config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default", label_key=label,
                                    preprocessing_function_names=["transform_features"])],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(
            class_name="SparseCategoricalAccuracy",
            threshold=tfma.MetricThreshold(value_threshold=tfma.GenericValueThreshold(
                lower_bound={"value": lower_bound})))])])
    evaluator = tfx.components.Evaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        baseline_model=resolver.outputs["model"], eval_config=eval_config)
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(filesystem=tfx.proto.PushDestination.Filesystem(
            base_directory=os.path.join(root, "serving"))))
    return [resolver, evaluator, pusher]


def fit_and_export(strategy, build_model, fn_args, train, evaluation, tf_transform_output,
                   label: str, model_inputs) -> None:
    """The tutorials' Trainer: build_model() under the strategy, compiled with Adam(1e-2) and
    sparse categorical cross-entropy on logits, model.fit, then `export`."""
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-2),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
    model.fit(train, steps_per_epoch=fn_args.train_steps, validation_data=evaluation,
              validation_steps=fn_args.eval_steps)
    export(model, tf_transform_output, label, fn_args.serving_model_dir, model_inputs)


def export(model, tf_transform_output, label: str, path: str, model_inputs) -> None:
    """Saves the model with the transform layer: serving_default on raw serialized examples
    (model_inputs: the transformed features -> the model's inputs) and transform_features."""
    model.tft_layer = tf_transform_output.transform_features_layer()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(serialized):
        spec = tf_transform_output.raw_feature_spec()
        spec.pop(label)
        return model(model_inputs(model.tft_layer(tf.io.parse_example(serialized, spec))))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def transform_features(serialized):
        return model.tft_layer(tf.io.parse_example(serialized, tf_transform_output.raw_feature_spec()))

    model.save(path, save_format="tf", signatures={
        "serving_default": serve, "transform_features": transform_features})
