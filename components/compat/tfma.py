"""TFMA's (tensorflow_model_analysis) internals that lockstep uses, behind named functions.

The Evaluator computes TFMA's metrics a batch at a time (components/batched_metrics.py): it fills
TFMA's own combiners' accumulators from a batch's arrays, which takes the combiner classes and the
settings they keep (all private to TFMA), and it runs TFMA's own steps after the accumulators
(merge, derived metrics and diffs, filtering), which TFMA's evaluator keeps private too. For one
Evaluator Do, `batches_kept` rebinds the three names TFMA's evaluation looks up to unbatch, slice
and combine example by example; `no_hot_key_fanout` rebinds TFMA's fanout constant on the
DirectRunner (components/evaluator.py)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

import apache_beam as beam
from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as mpv
from tensorflow_model_analysis.extractors import extractor, slice_key_extractor, unbatch_extractor
from tensorflow_model_analysis.metrics import (binary_confusion_matrices, calibration_histogram,
                                               example_count, mean_regression_error,
                                               multi_class_confusion_matrix_metrics,
                                               tf_metric_wrapper)

from components.compat.swapped import swapped
from components.compat.symbols import Symbol

_MPV = mpv.__name__
_EVAL_LIB = "tensorflow_model_analysis.api.model_eval_lib"  # its default extractors


def _metric(module: str, name: str) -> Symbol:
    return Symbol(f"tensorflow_model_analysis.metrics.{module}", name)


SYMBOLS = (
    _metric("example_count", "_ExampleCountCombiner._example_weighted"),
    _metric("tf_metric_wrapper", "_CompilableMetricsCombiner._output_names"),
    _metric("tf_metric_wrapper", "_CompilableMetricsCombiner._metrics"),
    _metric("multi_class_confusion_matrix_metrics",
            "_MultiClassConfusionMatrixCombiner._thresholds"),
    *(_metric("binary_confusion_matrices", f"_BinaryConfusionMatrixCombiner.{attribute}")
      for attribute in ("_enable_fractional_labels", "_binary_confusion_matrices")),
    *(_metric("calibration_histogram", f"_CalibrationHistogramCombiner.{attribute}")
      for attribute in ("_fractional_labels", "_prediction_based_bucketing", "_left", "_range",
                        "_num_buckets")),
    _metric("mean_regression_error", "_MeanAbsoluteErrorCombiner"),
    Symbol(_MPV, "_ComputationsCombineFn"),
    Symbol(_MPV, "_filter_and_separate_computations"),
    Symbol(_MPV, "_AddDerivedCrossSliceAndDiffMetrics"),
    Symbol(_MPV, "_remove_private_metrics"),
    Symbol(_MPV, "_filter_by_key_type"),
    Symbol(_MPV, "_ComputeMetricsAndPlots", read_by=_MPV),
    Symbol(_MPV, "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT", read_by=_MPV),
    Symbol(unbatch_extractor.__name__, "UnbatchExtractor", read_by=_EVAL_LIB),
    Symbol(slice_key_extractor.__name__, "SliceKeyExtractor", read_by=_EVAL_LIB),
)

# TFMA's combiners (private classes), each made by one metric of lockstep's eval config.
ExampleCountCombiner = example_count._ExampleCountCombiner
CompilableMetricsCombiner = tf_metric_wrapper._CompilableMetricsCombiner  # Keras metrics
MultiClassConfusionMatrixCombiner = (
    multi_class_confusion_matrix_metrics._MultiClassConfusionMatrixCombiner)
CalibrationHistogramCombiner = calibration_histogram._CalibrationHistogramCombiner
BinaryConfusionMatrixCombiner = binary_confusion_matrices._BinaryConfusionMatrixCombiner
MeanAbsoluteErrorCombiner = mean_regression_error._MeanAbsoluteErrorCombiner
# TFMA's combine of every computation's accumulator for one slice (one tuple of accumulators).
ComputationsCombineFn = mpv._ComputationsCombineFn
# (slice key, metrics) -> the same without the metrics TFMA computes only to derive others.
remove_private_metrics = mpv._remove_private_metrics
# (slice key, metrics and plots), key type -> (slice key, those of that key type).
filter_by_key_type = mpv._filter_by_key_type


def separate_computations(computations):
    """TFMA's metric computations deduplicated and split into non-derived, derived, cross-slice
    and CI-derived (its evaluator's own split)."""
    return mpv._filter_and_separate_computations(computations)


def derived_and_diff_metrics(derived_computations, baseline_model_name: str | None):
    """TFMA's step from each slice's metrics to its derived metrics and plots and the diffs
    against the baseline model (without cross-slice or CI-derived computations)."""
    return mpv._AddDerivedCrossSliceAndDiffMetrics(derived_computations, [], [],
                                                   baseline_model_name)


def example_weighted(combiner: ExampleCountCombiner) -> bool:
    """Whether an example count counts weights (else examples)."""
    return combiner._example_weighted


def keras_metrics(combiner: CompilableMetricsCombiner) -> Iterator[tuple[int, int, object]]:
    """(output index, metric index, the Keras metric) of each metric the combiner updates, in
    the order of its accumulator's weights (set up by the combiner's setup)."""
    for output_index, output_name in enumerate(combiner._output_names):
        for metric_index, metric in enumerate(combiner._metrics[output_name]):
            yield output_index, metric_index, metric


def confusion_thresholds(combiner: MultiClassConfusionMatrixCombiner) -> list[float]:
    """The thresholds of a multi-class confusion matrix."""
    return combiner._thresholds


def binary_fractional_labels(combiner: BinaryConfusionMatrixCombiner) -> bool:
    """Whether binary confusion matrices split each row by its fractional label."""
    return combiner._enable_fractional_labels


def add_to_binary_confusion_matrices(combiner: BinaryConfusionMatrixCombiner, accumulator,
                                     labels: list, predictions: list, weights: list):
    """The accumulator after the rows, added by the combiner's own matrices at once."""
    return combiner._binary_confusion_matrices.add_input(accumulator, labels, predictions,
                                                         weights, None)


@dataclasses.dataclass(frozen=True)
class HistogramBuckets:
    """How a calibration histogram buckets: `count` buckets of [left, left + width) over the
    prediction (or the label), by fractional labels or not."""

    left: float
    width: float
    count: int
    fractional_labels: bool
    by_prediction: bool


def histogram_buckets(combiner: CalibrationHistogramCombiner) -> HistogramBuckets:
    return HistogramBuckets(combiner._left, combiner._range, combiner._num_buckets,
                            combiner._fractional_labels, combiner._prediction_based_bucketing)


def _passing(stage_name: str):
    """An extractor maker (any arguments) whose extractor passes the extracts on unchanged."""
    return lambda *_, **__: extractor.Extractor(stage_name=stage_name,
                                                ptransform=beam.Map(lambda x: x))


@contextlib.contextmanager
def batches_kept(compute_metrics_and_plots) -> Iterator[None]:
    """For the block, TFMA's evaluation keeps its batches and computes its metrics and plots with
    `compute_metrics_and_plots` (the arguments and outputs of TFMA's private
    _ComputeMetricsAndPlots): TFMA's default extractors (model_eval_lib) make its UnbatchExtractor
    and SliceKeyExtractor through their modules each run, and its evaluator calls
    _ComputeMetricsAndPlots by its module's name, so those three names are rebound."""
    with swapped(unbatch_extractor, "UnbatchExtractor", _passing("ExtractUnbatchedInputs")), \
            swapped(slice_key_extractor, "SliceKeyExtractor",
                    _passing(slice_key_extractor.SLICE_KEY_EXTRACTOR_STAGE_NAME)), \
            swapped(mpv, "_ComputeMetricsAndPlots", compute_metrics_and_plots):
        yield


def no_hot_key_fanout():
    """For the block, TFMA combines each slice's metrics without a hot-key fanout (its private
    module constant, 8, read when its evaluation is built)."""
    return swapped(mpv, "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT", None)


def hot_key_fanout() -> int | None:
    """The fanout TFMA combines each slice's metrics with now."""
    return mpv._COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT
