"""The lockstep pipeline: CsvExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator ->
Transform -> Trainer -> Evaluator -> Pusher, with LatestPushedModel as the Evaluator's baseline."""

from __future__ import annotations

import dataclasses

from tensorflow_model_analysis.proto import config_pb2 as tfma
from tfx.components import Pusher, SchemaGen, StatisticsGen, Transform
from tfx.orchestration import metadata, pipeline as tfx_pipeline
from tfx.orchestration.data_types import RuntimeParameter
from tfx.proto import example_gen_pb2, pusher_pb2

from components.csv_example_gen import CsvExampleGen
from components.evaluator import Evaluator
from components.example_validator import ExampleValidator
from components.latest_model import LatestPushedModel
from components.trainer import RUN_PARAMETERS, Trainer
from pipeline.config import Config
from trainer_module import features

PREPROCESSING_FN = "trainer_module.preprocessing.preprocessing_fn"
RUN_FN = "trainer_module.run.run_fn"
BASELINE_NODE = "LatestPushedModel"


def eval_config(config: Config, label: str, task: str) -> tfma.EvalConfig:
    label_key = features.transformed_name(label)
    if task == features.REGRESSION:
        threshold = tfma.MetricThreshold(
            value_threshold=tfma.GenericValueThreshold(upper_bound={"value": config.eval.max_rmse})
            if config.eval.max_rmse else None,
            change_threshold=tfma.GenericChangeThreshold(
                direction=tfma.MetricDirection.LOWER_IS_BETTER,
                absolute={"value": config.eval.max_regression}))
        metric = tfma.MetricConfig(class_name="RootMeanSquaredError", threshold=threshold)
        prediction_key = "predictions"
    else:
        threshold = tfma.MetricThreshold(
            value_threshold=tfma.GenericValueThreshold(lower_bound={"value": config.eval.min_accuracy}),
            change_threshold=tfma.GenericChangeThreshold(
                direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                absolute={"value": -config.eval.max_regression}))
        metric = tfma.MetricConfig(class_name="SparseCategoricalAccuracy", threshold=threshold)
        prediction_key = "probabilities"
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default", label_key=label_key,
                                    prediction_key=prediction_key,
                                    preprocessing_function_names=["transform_features"])],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[metric, tfma.MetricConfig(class_name="ExampleCount")])])


DATA_ROOT_PARAMETER = "data_root"


def trainer_custom_config(config: Config, label: str) -> dict:
    trainer = dataclasses.asdict(config.trainer)
    if config.trainer.tpu_slice and config.trainer.strategy == "auto":
        # On a GKE TPU node the chips are local to the pod.
        trainer.update(strategy="tpu", tpu=config.trainer.tpu or "local")
    return {"label": label, "trainer": trainer}


def run_parameter_values(config: Config) -> dict:
    """The trainer settings a Kubeflow run can override (components/trainer.py), typed."""
    return {name: kind(getattr(config.trainer, name)) for name, kind in RUN_PARAMETERS.items()}


def create_pipeline(config: Config, input_base: str, pattern: str, task: str,
                    kubeflow: bool = False) -> tfx_pipeline.Pipeline:
    """input_base/pattern: the CSV files. task: from the label column's type (see data_check).

    kubeflow: the data root and the trainer's RUN_PARAMETERS become runtime parameters a run
    can override, and there is no local ML Metadata connection."""
    label = config.data.label
    trainer_parameters = run_parameter_values(config)
    if kubeflow:
        input_base = RuntimeParameter(name=DATA_ROOT_PARAMETER, ptype=str, default=input_base)
        trainer_parameters = {
            name: RuntimeParameter(name=name, ptype=RUN_PARAMETERS[name], default=value)
            for name, value in trainer_parameters.items()}
    example_gen = CsvExampleGen(
        input_base=input_base, label=label, missing_values=config.data.missing_values,
        span_pattern=config.data.span_pattern, span_window=config.data.span_window,
        input_config=example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="single_split", pattern=pattern)]),
        output_config=example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
            example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=config.data.train_buckets),
            example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=config.data.eval_buckets)])))
    statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=False)
    example_validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"])
    transform = Transform(
        examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"],
        preprocessing_fn=PREPROCESSING_FN, custom_config={"label": label},
        disable_statistics=True)
    latest = LatestPushedModel(serving_dir=config.paths.serving_dir).with_id(BASELINE_NODE)
    trainer_inputs = {}
    if config.trainer.warm_start:
        trainer_inputs["base_model"] = latest.outputs["model"]
    trainer = Trainer(
        run_fn=RUN_FN,
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        custom_config=trainer_custom_config(config, label),
        parameters=trainer_parameters,
        **trainer_inputs)
    # The validator gates training: make the Trainer wait for it.
    trainer.add_upstream_node(example_validator)
    evaluator = Evaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        baseline_model=latest.outputs["model"], eval_config=eval_config(config, label, task))
    pusher = Pusher(
        model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(
                base_directory=config.paths.serving_dir)))
    return tfx_pipeline.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.paths.pipeline_root,
        components=[example_gen, statistics_gen, schema_gen, example_validator, transform,
                    latest, trainer, evaluator, pusher],
        enable_cache=config.enable_cache,
        metadata_connection_config=None if kubeflow else
        metadata.sqlite_metadata_connection_config(config.metadata_path),
        beam_pipeline_args=list(config.beam_args))
