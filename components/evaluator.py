"""Evaluator whose baseline comes from LatestPushedModel: an artifact marked not found is no baseline.

With no baseline TFMA drops the baseline model spec and its change thresholds, so the first model
is judged by the absolute thresholds alone; afterwards it must also not regress.

`read_metrics` reads its output back (the Pusher records the gating metric, the run report shows
them all).
"""

from tfx.components.evaluator.component import Evaluator as _StockEvaluator
from tfx.components.evaluator import executor as stock_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from components.latest_model import is_found
from components.memory import objects_frozen


class Executor(stock_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):
        key = standard_component_specs.BASELINE_MODEL_KEY
        input_dict = dict(input_dict)
        input_dict[key] = [m for m in input_dict.get(key, []) if is_found(m)]
        with objects_frozen():
            return super().Do(input_dict, output_dict, exec_properties)


class Evaluator(_StockEvaluator):
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)


def slice_name(slice_key) -> str:
    return ", ".join(f"{k.column}={_slice_value(k)}" for k in slice_key.single_slice_keys)


def _slice_value(key) -> str:
    kind = key.WhichOneof("kind")
    value = getattr(key, kind) if kind else ""
    return value.decode() if isinstance(value, bytes) else str(value)


def read_metrics(uri: str) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The candidate's metrics on the whole eval split (baseline diffs included), and
    {"island=Biscoe": {metric: value}} for each slice of each sliced column: one read."""
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
