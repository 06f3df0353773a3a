"""Evaluator whose baseline comes from LatestPushedModel: an artifact marked not found is no baseline.

With no baseline TFMA drops the baseline model spec and its change thresholds, so the first model
is judged by the absolute thresholds alone; afterwards it must also not regress.
"""

from tfx.components.evaluator.component import Evaluator as _StockEvaluator
from tfx.components.evaluator import executor as stock_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from components.latest_model import is_found


class Executor(stock_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):
        key = standard_component_specs.BASELINE_MODEL_KEY
        input_dict = dict(input_dict)
        input_dict[key] = [m for m in input_dict.get(key, []) if is_found(m)]
        return super().Do(input_dict, output_dict, exec_properties)


class Evaluator(_StockEvaluator):
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
