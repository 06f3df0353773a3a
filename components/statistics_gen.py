"""TFX's StatisticsGen, reading the examples in batches (components/batched_records.py): the same
statistics, without Beam's Python per record."""

from tfx.components.statistics_gen import executor as stock_executor
from tfx.components.statistics_gen.component import StatisticsGen as _StockStatisticsGen
from tfx.dsl.components.base import executor_spec

from components.batched_records import batched_reads
from components.compat import beam as beam_compat


class Executor(stock_executor.Executor):
    @beam_compat.spare_fixed_costs  # two fixed costs of Beam's spared: compat/beam.py
    def Do(self, input_dict, output_dict, exec_properties):
        with batched_reads():
            super().Do(input_dict, output_dict, exec_properties)


class StatisticsGen(_StockStatisticsGen):
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
