"""Evaluator whose baseline comes from LatestPushedModel: an artifact marked not found is no baseline.

With no baseline TFMA drops the baseline model spec and its change thresholds, so the first model
is judged by the absolute thresholds alone; afterwards it must also not regress.

TFMA decodes every column its schema names and splits each into one value per example in Python;
the model reads the serialized examples itself, so the Evaluator decodes only the columns it slices
by and the label (`needed_columns`): a 200-column table otherwise cost 200 Python values per eval
row.

TFMA's metrics are computed from whole batches of predictions (components/batched_metrics.py)
where the eval config is lockstep's own; the figures, thresholds, files and blessing stay TFMA's.

It also starts the serving smoke test of the candidate (components/serving_check.py) as it begins,
in its own process beside TFMA, and records the verdict on the blessing for the Pusher; that
process also scores samples of the train and eval splits, and the blessing records the model's
metrics on each (components/generalization.py: the generalisation gap the summary shows).

With eval.beat_reference, it also takes the gradient-boosting reference's figures
(components/gradient_boosting.py) and a model TFMA blessed is not blessed when its gating metric
falls short of the reference's by more than eval.margin (`ReferenceBound`); the blessing says
why (REFERENCE_FAILURE_KEY). A reference that was not measured holds nothing back.

`read_metrics` reads its output back (the Pusher records the gating metric, the run report shows
them all).
"""

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile

from tfx import types
from tfx.components.evaluator import constants
from tfx.components.evaluator.component import Evaluator as _StockEvaluator
from tfx.components.evaluator import executor as stock_executor
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import io_utils, json_utils, path_utils, proto_utils

from components import batched_metrics, generalization, gradient_boosting, serving_check
from components import serving_versions
from components.batched_records import batched_reads
from components.compat import beam as beam_compat
from components.latest_model import is_found
from components.memory import objects_frozen
from trainer_module import autograph_rules, features


REFERENCE_KEY = "reference"  # input: the gradient-boosting reference's figures
REFERENCE_BOUND_KEY = "reference_bound"  # parameter: ReferenceBound as JSON
REFERENCE_FAILURE_KEY = "reference_failure"  # on the blessing: why the reference held it back


@dataclasses.dataclass(frozen=True)
class ReferenceBound:
    """eval.beat_reference: the gating metric (`metric`, TFMA's `tfma_name`) must reach the
    gradient-boosting reference's figure on the same eval split, worse by at most `margin`
    (a share of the reference's figure where `relative`, as eval.margin is for rmse)."""

    metric: str
    tfma_name: str
    higher_is_better: bool
    margin: float
    relative: bool = False

    def needed(self, reference: float) -> float:
        slack = abs(reference) * self.margin if self.relative else self.margin
        return reference - slack if self.higher_is_better else reference + slack

    def failure(self, model: float | None, reference: gradient_boosting.Reference | None) -> str:
        """Why the model's figure does not reach the reference's; "" when it does, and when the
        reference has no figure (not measured: it informs, it holds nothing back)."""
        if reference is None or reference.value is None or model is None:
            return ""
        needed = self.needed(reference.value)
        if (model >= needed) if self.higher_is_better else (model <= needed):
            return ""
        need = "at least" if self.higher_is_better else "at most"
        share = " of it" if self.relative else ""
        return (f"{self.metric} {model:.4f}, needs {need} {needed:.4f}: "
                f"{reference.name}'s {reference.value:.4f} on this "
                f"split, eval.margin {self.margin:g}{share} (eval.beat_reference)")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ReferenceBound":
        values = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(values, dict) or set(values) - names:
            raise ValueError(f"{REFERENCE_BOUND_KEY}: expected the keys {sorted(names)}, got "
                             f"{values!r}")
        return cls(**values)


def hold_to_reference(blessing, bound: ReferenceBound, reference_uri: str,
                      evaluation_uri: str) -> str:
    """A blessed model whose gating metric falls short of the reference's is not blessed: the
    blessing's file and property say so, and REFERENCE_FAILURE_KEY why. Returns why ("" when
    it holds)."""
    if not blessing.get_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY):
        return ""
    model = read_metrics(evaluation_uri)[0].get(bound.tfma_name)
    why = bound.failure(model, gradient_boosting.read(reference_uri))
    if not why:
        return ""
    blessed = os.path.join(blessing.uri, constants.BLESSED_FILE_NAME)
    if fileio.exists(blessed):
        fileio.remove(blessed)
    io_utils.write_string_file(os.path.join(blessing.uri, constants.NOT_BLESSED_FILE_NAME), "")
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY,
                                     constants.NOT_BLESSED_VALUE)
    blessing.set_string_custom_property(REFERENCE_FAILURE_KEY, why)
    return why


class Executor(stock_executor.Executor):
    @beam_compat.spare_fixed_costs  # two fixed costs of Beam's spared: compat/beam.py
    def Do(self, input_dict, output_dict, exec_properties):
        key = standard_component_specs.BASELINE_MODEL_KEY
        input_dict = dict(input_dict)
        input_dict[key] = [m for m in input_dict.get(key, []) if is_found(m)]
        model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        source = path_utils.serving_model_path(model.uri)
        examples = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.EXAMPLES_KEY])
        schema_key = standard_component_specs.SCHEMA_KEY
        if input_dict.get(schema_key):
            input_dict[schema_key] = [self._needed_columns_schema(
                input_dict[schema_key], exec_properties[standard_component_specs.EVAL_CONFIG_KEY])]
        label_key = _label_key(exec_properties.get(standard_component_specs.EVAL_CONFIG_KEY))
        scratch = tempfile.mkdtemp(prefix="lockstep-figures-")  # local, wherever the root is
        figures = os.path.join(scratch, "generalization.json")
        check = serving_check.start(
            source, serving_check.eval_example_files(examples),
            figures_to=figures if label_key else "", label_key=label_key,
            splits={split: serving_check.split_pattern(examples, split)
                    for split in artifact_utils.decode_split_names(examples.split_names)
                    if split in ("train", "eval")})
        autograph_rules.install()  # TFMA's Keras metric updates: tf_keras's code unconverted
        try:
            with objects_frozen(), batched_reads(), _short_array_text(), \
                    _no_hot_key_fanout(self._beam_pipeline_args), \
                    _batched_metrics(exec_properties):
                super().Do(input_dict, output_dict, exec_properties)
        except BaseException:
            check.cancel()
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        blessing = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.BLESSING_KEY])
        blessing.set_string_custom_property(serving_check.VERDICT_KEY, check.verdict())
        blessing.set_string_custom_property(serving_check.CHECKED_SHA_KEY,
                                            serving_versions.content_hash(source))
        if os.path.exists(figures):
            with open(figures) as handle:
                blessing.set_string_custom_property(generalization.FIGURES_KEY,
                                                    json.dumps(json.load(handle)))
        shutil.rmtree(scratch, ignore_errors=True)
        bound = exec_properties.get(REFERENCE_BOUND_KEY)
        if bound and input_dict.get(REFERENCE_KEY):
            hold_to_reference(blessing, ReferenceBound.from_json(bound),
                              artifact_utils.get_single_uri(input_dict[REFERENCE_KEY]),
                              artifact_utils.get_single_uri(
                                  output_dict[standard_component_specs.EVALUATION_KEY]))

    def _needed_columns_schema(self, schemas, eval_config_json: str):
        """A Schema artifact, in this execution's temp dir, of the columns TFMA needs."""
        from tensorflow_model_analysis.proto import config_pb2

        schema = io_utils.SchemaReader().read(
            io_utils.get_only_uri_in_dir(artifact_utils.get_single_uri(schemas)))
        eval_config = proto_utils.json_to_proto(eval_config_json, config_pb2.EvalConfig())
        artifact = standard_artifacts.Schema()
        artifact.uri = os.path.join(self._get_tmp_dir(), "needed-columns-schema")
        io_utils.write_pbtxt_file(os.path.join(artifact.uri, "schema.pbtxt"),
                                  needed_columns(schema, eval_config))
        return artifact


def _batched_metrics(exec_properties):
    """TFMA's metrics from whole batches, where every metric and slice of the eval config is one
    components/batched_metrics.py fills; TFMA as it is otherwise."""
    from tensorflow_model_analysis.proto import config_pb2

    raw = exec_properties.get(standard_component_specs.EVAL_CONFIG_KEY)
    config = proto_utils.json_to_proto(raw, config_pb2.EvalConfig()) if raw else None
    if config is None or not batched_metrics.supported(config):
        return contextlib.nullcontext()
    return batched_metrics.installed()


def _label_key(eval_config_json: str | None) -> str:
    """The transformed label's name, from the eval config ("" without one)."""
    if not eval_config_json:
        return ""
    from tensorflow_model_analysis.proto import config_pb2

    config = proto_utils.json_to_proto(eval_config_json, config_pb2.EvalConfig())
    return config.model_specs[0].label_key if config.model_specs else ""


def _no_hot_key_fanout(beam_args):
    """TFMA combines each slice's metrics with a hot-key fanout of 8, so that on a distributed
    runner the overall slice (every example) does not make one straggler. On the DirectRunner, in
    one process, there is nothing to spread, and the fanout cost two more Beam steps per example
    (a random shard key, a window). For the length of one Do there, TFMA's constant says none."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from components.compat import tfma as tfma_compat

    runner = PipelineOptions(list(beam_args or [])).view_as(StandardOptions).runner
    if runner not in (None, "DirectRunner", "direct"):
        return contextlib.nullcontext()
    return tfma_compat.no_hot_key_fanout()


def _short_array_text():
    """TFMA calls the model's signatures with the batch as a positional argument; TensorFlow tries
    the structured signature first, builds a TypeError whose text holds the whole batch (every
    serialized example, formatted by numpy), drops it and calls the flat signature. With numpy's
    print threshold low, that text summarizes the batch: it was a second of formatting per 60,000
    eval rows."""
    import numpy as np

    return np.printoptions(threshold=8)


def needed_columns(schema, eval_config):
    """The schema with only the features TFMA reads from the raw examples: the columns it slices
    by, and the label's column (the metrics take the transformed label; kept so that a schema
    never ends up empty)."""
    keep = {key for spec in eval_config.slicing_specs for key in spec.feature_keys}
    keep |= {key for spec in eval_config.slicing_specs for key in spec.feature_values}
    labels = {spec.label_key for spec in eval_config.model_specs}
    kept = [f for f in schema.feature
            if f.name in keep or features.transformed_name(f.name) in labels]
    result = type(schema)()
    result.CopyFrom(schema)
    del result.feature[:]
    result.feature.extend(kept)
    return result


class EvaluatorSpec(standard_component_specs.EvaluatorSpec):
    """TFX's, and the gradient-boosting reference with its bound (eval.beat_reference)."""

    PARAMETERS = {**standard_component_specs.EvaluatorSpec.PARAMETERS,
                  REFERENCE_BOUND_KEY: ExecutionParameter(type=str, optional=True)}
    INPUTS = {**standard_component_specs.EvaluatorSpec.INPUTS,
              REFERENCE_KEY: ChannelParameter(type=standard_artifacts.ModelEvaluation,
                                              optional=True)}


class Evaluator(_StockEvaluator):
    SPEC_CLASS = EvaluatorSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, examples: types.BaseChannel, model: types.BaseChannel,
                 baseline_model: types.BaseChannel, schema: types.BaseChannel, eval_config,
                 reference: types.BaseChannel | None = None,
                 reference_bound: ReferenceBound | None = None):
        """TFX's Evaluator with the arguments lockstep gives it (its spec as TFX's __init__
        builds it for them), and, for eval.beat_reference, the reference and its bound."""
        spec = EvaluatorSpec(
            examples=examples, model=model, baseline_model=baseline_model, schema=schema,
            eval_config=eval_config, feature_slicing_spec=None,
            fairness_indicator_thresholds=json_utils.dumps(None),
            example_splits=json_utils.dumps(None), module_file=None, module_path=None,
            evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=types.Channel(type=standard_artifacts.ModelBlessing),
            **({REFERENCE_KEY: reference,
                REFERENCE_BOUND_KEY: reference_bound.to_json()} if reference_bound else {}))
        base_beam_component.BaseBeamComponent.__init__(self, spec=spec)


def slice_name(slice_key) -> str:
    return ", ".join(f"{k.column}={_slice_value(k)}" for k in slice_key.single_slice_keys)


def _slice_value(key) -> str:
    kind = key.WhichOneof("kind")
    value = getattr(key, kind) if kind else ""
    return value.decode() if isinstance(value, bytes) else str(value)


def read_metrics(uri: str) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The candidate's metrics on the whole eval split (baseline diffs included), and
    {"island=Biscoe": {metric: value}} for each slice of each sliced column: one read.

    A binarized metric (a binary label's auc, precision, ...: one class id, the positive class,
    pipeline/evaluation.py) goes by its plain name."""
    import tensorflow_model_analysis as tfma

    overall, slices = {}, {}
    for per_slice in tfma.load_metrics(uri):
        sliced = bool(per_slice.slice_key.single_slice_keys)
        values = {}
        for kv in per_slice.metric_keys_and_values:
            if kv.key.model_name and kv.key.model_name != "candidate":
                continue
            if kv.value.HasField("double_value") and not (sliced and kv.key.is_diff):
                name = kv.key.name + (" (baseline diff)" if kv.key.is_diff else "")
                values[name] = kv.value.double_value.value
        if sliced:
            slices[slice_name(per_slice.slice_key)] = values
        else:
            overall = values
    return overall, dict(sorted(slices.items()))


def read_plots(uri: str) -> dict:
    """The candidate's plots on the whole eval split: {"calibration": [(lower, upper, examples,
    mean label, mean prediction), ...] per bucket with examples (binary label), "confusion":
    {(actual class id, predicted class id): examples} (more classes)}."""
    import tensorflow_model_analysis as tfma

    found: dict = {}
    for per_slice in tfma.load_plots(uri):
        if per_slice.slice_key.single_slice_keys:
            continue
        for kv in per_slice.plot_keys_and_values:
            if kv.key.model_name and kv.key.model_name != "candidate":
                continue
            plot = kv.value
            if plot.HasField("calibration_histogram_buckets"):
                found["calibration"] = [
                    (b.lower_threshold_inclusive, b.upper_threshold_exclusive,
                     b.num_weighted_examples.value,
                     b.total_weighted_label.value / b.num_weighted_examples.value,
                     b.total_weighted_refined_prediction.value / b.num_weighted_examples.value)
                    for b in plot.calibration_histogram_buckets.buckets
                    if b.num_weighted_examples.value > 0]
            if plot.HasField("multi_class_confusion_matrix_at_thresholds"):
                matrices = plot.multi_class_confusion_matrix_at_thresholds.matrices
                if matrices:
                    found["confusion"] = {
                        (e.actual_class_id, e.predicted_class_id): e.num_weighted_examples
                        for e in matrices[0].entries}
    return found
