"""The lockstep pipeline, with LatestPushedModel as the Evaluator's baseline:

    CsvExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -.
                  `-> Transform -------------------------------------> Trainer -> Evaluator -> Pusher
                  `-> GradientBoosting (once the validator is done)

Transform reads the records with the ExampleGen's types-only schema (the types they were encoded
with), so it runs beside the validation branch (pipeline/local/dag_runner.py locally; KFP runs
ready tasks side by side by itself); the Trainer waits for both. The gradient-boosting reference
(components/gradient_boosting.py) waits for the validator, then runs beside the end of Transform
or the Trainer (locally in the second lane, on one thread)."""

from __future__ import annotations

import dataclasses
import json

from tfx.components.schema_gen.component import SchemaGen
from tfx.orchestration import metadata, pipeline as tfx_pipeline
from tfx.proto import example_gen_pb2

from components.csv_example_gen import CsvExampleGen
from components.example_gen_spec import ExampleGenSpec
from components.evaluator import Evaluator
from components.example_validator import ExampleValidator
from components.gradient_boosting import GradientBoostingReference
from components.latest_model import LatestPushedModel
from components.pusher import Pusher
from components.statistics_gen import StatisticsGen
from components.trainer import Trainer
from components.transform import Transform
from components.vertex_training import VertexTrainer
from components import serving_versions, vertex_job
from pipeline import evaluation
from pipeline.binding import HERE, Binding
from pipeline.node_ids import (
    BASELINE_NODE, EVALUATOR_NODE, EXAMPLE_GEN_NODE, PUSHER_NODE, REFERENCE_NODE, SCHEMA_NODE,
    STATISTICS_NODE, TRAINER_NODE, TRANSFORM_NODE, VALIDATOR_NODE)
from pipeline.config import Config
from pipeline.preflight import Decisions
from trainer_module import hooks, slices
from trainer_module.settings import PARAMETER_SERVER, RUN_PARAMETERS
from trainer_module.custom_config import TrainSpec, TransformSpec

PREPROCESSING_FN = "trainer_module.preprocessing.preprocessing_fn"
RUN_FN = "trainer_module.run_fn.run_fn"


# StatisticsGen has the statistics; the Trainer applies the transform graph to the raw examples
# as it reads them (trainer_module/input_pipeline.py), so Transform only analyzes: no second copy
# of the data is written. These are a synchronous run's; transform_settings gives each config's.
TRANSFORM_SETTINGS = {"disable_statistics": True, "materialize": False, "force_tf_compat_v1": True}


def transform_settings(config: Config) -> dict:
    """Transform's settings. tf.Transform builds its graph once in its TF1 graph mode, where its
    TF2 mode traces the preprocessing_fn again for every analysis phase and the saved model (a
    53-column table: 7.0 s against 12.5 s, the same transformed values to float32 rounding).
    Asynchronous training keeps TF2's graph: a parameter-server worker gets the transform layer's
    tables copied from the chief, which a TF1 graph's tables, initialized by running its init
    op where it is loaded, cannot be. So does a multi-host TPU slice, whose one process feeds
    every host's input pipeline on that host (not tried on a real slice with a TF1 graph)."""
    remote_tables = config.trainer.strategy == PARAMETER_SERVER or multi_host(config)
    return {**TRANSFORM_SETTINGS, "force_tf_compat_v1": not remote_tables}


DATA_ROOT_PARAMETER = "data_root"


def analyzer_cache_dir(config: Config) -> str:
    """Where Transform keeps its analyzer cache across runs (components/transform.py)."""
    return f"{config.paths.pipeline_root.rstrip('/')}/analyzer_cache"


def code_fingerprint(config: Config) -> str:
    """A hash of the user's hook code ("" for none; trainer_module/hooks.py): in both custom
    configs, so an edit to that code misses TFX's cache."""
    return hooks.fingerprint(config.trainer.model, config.trainer.loss,
                             config.transform.preprocessing_fn)


def example_gen_spec(config: Config) -> ExampleGenSpec:
    data = config.data
    return ExampleGenSpec(data.label, tuple(data.missing_values), data.span_pattern,
                          data.span_window, data.span_marker, tuple(data.split_by),
                          data.split_seed)


def multi_host(config: Config) -> bool:
    """Whether trainer.tpu_slice spans several hosts (its Trainer is then a Vertex AI job)."""
    return bool(config.trainer.tpu_slice) and not slices.get(config.trainer.tpu_slice).single_host


def train_spec(config: Config, label: str, task: str) -> TrainSpec:
    """The Trainer's settings as the user gave them (config.trainer, whole: a TPU slice's
    strategy is the Trainer's to resolve, trainer_module/strategy.py)."""
    return TrainSpec(label, task, config.trainer, code_fingerprint(config))


def vertex_run_parameter_values(config: Config) -> dict[str, str]:
    """The Vertex AI job's settings a run can override ({} unless the Trainer is a Vertex AI
    job: a multi-host slice, several GPU machines)."""
    if not vertex_job.submits_job(config.trainer):
        return {}
    v = config.vertex
    return {vertex_job.PROJECT: v.project, vertex_job.REGION: v.region,
            vertex_job.SERVICE_ACCOUNT: v.service_account,
            vertex_job.NETWORK: v.network}


def vertex_settings(config: Config, image: str, binding: Binding = HERE) -> dict:
    """The Vertex AI job's settings for a multi-host slice's Trainer (components/
    vertex_training.py); project, region, service account and network as run parameters."""
    v = config.vertex
    values = {name: binding.parameter(name, str, value)
              for name, value in vertex_run_parameter_values(config).items()}
    return {**values, vertex_job.IMAGE: image,
            vertex_job.TPU_SLICE: config.trainer.tpu_slice,
            vertex_job.API_ENDPOINT: v.api_endpoint,
            vertex_job.POLL_SECONDS: v.poll_seconds,
            vertex_job.RESUBMITS: v.resubmits}


def transform_spec(config: Config, decisions: Decisions) -> TransformSpec:
    """The Transform's settings: the decisions', the user's preprocessing_fn, and the numeric
    columns packed in one tensor for the built-in model (a user's trainer.model reads them a
    feature each)."""
    return dataclasses.replace(decisions.transform_spec(config.data.label),
                               preprocessing_fn=config.transform.preprocessing_fn,
                               code_fingerprint=code_fingerprint(config),
                               packed=not config.trainer.model)


def run_parameter_values(config: Config) -> dict:
    """The trainer settings a Kubeflow run can override (trainer_module/settings.py), typed."""
    return {name: kind(getattr(config.trainer, name)) for name, kind in RUN_PARAMETERS.items()}


def _up_to(components: list, node: str | None) -> list:
    """`node` and the components it needs, upstream (all for None): `lockstep verify` runs up to
    Transform, that is the ExampleGen and Transform."""
    if not node:
        return components
    by_id = {c.id: c for c in components}
    needed, stack = {node}, [by_id[node]]
    while stack:
        component = stack.pop()
        # Its inputs' producers (tfx_pipeline.Pipeline adds these edges only when it is built)
        # and the nodes it was told to wait for.
        upstream = {u.id for u in component.upstream_nodes} | {
            producer for channel in component.inputs.values()
            for producer in channel.get_data_dependent_node_ids()}
        for upstream_id in upstream - needed:
            needed.add(upstream_id)
            stack.append(by_id[upstream_id])
    kept = [c for c in components if c.id in needed]
    for component in kept:  # a node told to wait for a kept one (add_upstream_node) is not kept
        for downstream in list(component.downstream_nodes):
            if downstream.id not in needed:
                component.remove_downstream_node(downstream)
    return kept


def create_pipeline(config: Config, input_base: str, pattern: str, decisions: Decisions,
                    binding: Binding = HERE, to_node: str | None = None,
                    image: str = "") -> tfx_pipeline.Pipeline:
    """input_base/pattern: the CSV files. decisions: taken once before the run
    (pipeline/preflight.py): the task, the columns' roles and the gate; Transform, Trainer and
    the eval config all take them from here.

    binding: what the orchestrator that runs it provides (runtime parameters, its own ML
    Metadata). to_node: the nodes up to it (`lockstep verify`).
    image: the pipeline's image, which a multi-host slice's Vertex AI job runs."""
    label, task, gate = config.data.label, decisions.task, decisions.gate
    input_base = binding.parameter(DATA_ROOT_PARAMETER, str, input_base)
    trainer_parameters = {name: binding.parameter(name, RUN_PARAMETERS[name], value)
                          for name, value in run_parameter_values(config).items()}
    example_gen = CsvExampleGen(
        input_base=input_base, spec=example_gen_spec(config),
        input_config=example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="single_split", pattern=pattern)]),
        output_config=example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
            example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=config.data.train_buckets),
            example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=config.data.eval_buckets)])),
    ).with_id(EXAMPLE_GEN_NODE)
    statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"]).with_id(STATISTICS_NODE)
    schema_gen = SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=False,
    ).with_id(SCHEMA_NODE)
    example_validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"],
    ).with_id(VALIDATOR_NODE)
    transform = Transform(
        examples=example_gen.outputs["examples"], schema=example_gen.outputs["schema"],
        preprocessing_fn=PREPROCESSING_FN,
        custom_config=transform_spec(config, decisions).to_custom_config(),
        analyzer_cache_dir=analyzer_cache_dir(config) if config.data.span_pattern else "",
        **transform_settings(config)).with_id(TRANSFORM_NODE)
    answers = json.dumps(serving_versions.target(label, task))
    latest = LatestPushedModel(serving_dir=config.paths.serving_dir,
                               target=answers).with_id(BASELINE_NODE)
    trainer_inputs = {"base_model": latest.outputs["model"]} if config.trainer.warm_start else {}
    trainer_class, vertex = Trainer, {}
    if vertex_job.submits_job(config.trainer):
        trainer_class = VertexTrainer
        vertex = {"vertex": vertex_settings(config, image, binding)}
    trainer = trainer_class(
        run_fn=RUN_FN,
        examples=example_gen.outputs["examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        custom_config=train_spec(config, label, task).to_custom_config(),
        parameters=trainer_parameters,
        **trainer_inputs, **vertex).with_id(TRAINER_NODE)
    # The validator gates training: make the Trainer wait for it.
    trainer.add_upstream_node(example_validator)
    reference = GradientBoostingReference(
        examples=example_gen.outputs["examples"],
        columns=decisions.transform_spec(label), metric=gate.metric).with_id(REFERENCE_NODE)
    reference.add_upstream_node(example_validator)  # on validated data, beside Transform's end
    beat_reference = {}
    if gate.beat_reference:
        beat_reference = {"reference": reference.outputs["reference"],
                          "reference_bound": evaluation.reference_bound(gate)}
    evaluator = Evaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        baseline_model=latest.outputs["model"], schema=schema_gen.outputs["schema"],
        eval_config=evaluation.eval_config(gate, label, config.eval.slices,
                                           config.eval.max_regression),
        **beat_reference).with_id(EVALUATOR_NODE)
    pusher = Pusher(
        model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        examples=example_gen.outputs["examples"], evaluation=evaluator.outputs["evaluation"],
        serving_dir=config.paths.serving_dir, keep_versions=config.push.keep_versions,
        metric_name=gate.tfma_name(),
        higher_is_better=evaluation.METRICS[gate.metric].higher_is_better,
        gate=json.dumps(gate.to_dict()), target=answers).with_id(PUSHER_NODE)
    components = _up_to([example_gen, statistics_gen, schema_gen, example_validator, transform,
                         latest, trainer, reference, evaluator, pusher], to_node)
    return tfx_pipeline.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.paths.pipeline_root,
        components=components,
        enable_cache=config.enable_cache,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            config.metadata_path) if binding.local_metadata else None,
        beam_pipeline_args=list(config.beam_args))
