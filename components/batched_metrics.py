"""TFMA's metrics from whole batches of predictions: the Evaluator's figures, without TFMA's Python
per example.

TFMA splits every batch of predictions into one extract per example (its UnbatchExtractor), finds
each example's slices, and hands each example to every metric's combiner, which takes its label,
prediction and weight apart again in Python (`to_label_prediction_example_weight`): on
nycflights13's 67,018 eval rows that was 10 of the Evaluator's 13 s. Here, for the length of one
Evaluator Do (`installed`), TFMA keeps its batches: the slices are found a batch at a time, and
each of TFMA's own combiners gets its accumulator filled from the batch's arrays (`_fill`), as it
would have filled it example by example. Everything after the accumulators is TFMA's own: merging
them per slice, their outputs, the derived metrics and plots (precision, recall, the confusion
matrix and calibration plots), the diffs against the baseline model, the thresholds, the
validation, the files written and the blessing. The figures equal TFMA's to float rounding
(tests/test_evaluation.py compares them).

Only the combiners lockstep's eval config makes (pipeline/evaluation.py) are filled here, and
only slices on one column or none; any other config (`supported`) leaves TFMA as it is.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis import constants
from tensorflow_model_analysis.metrics import (calibration_histogram, metric_specs, metric_types,
                                               multi_class_confusion_matrix_metrics)

from components import metrics as lockstep_metrics
from components.compat import tfma as tfma_compat

_FILLED = (tfma_compat.ExampleCountCombiner, tfma_compat.CompilableMetricsCombiner,
           tfma_compat.MultiClassConfusionMatrixCombiner,
           tfma_compat.CalibrationHistogramCombiner, tfma_compat.BinaryConfusionMatrixCombiner,
           tfma_compat.MeanAbsoluteErrorCombiner, lockstep_metrics._Combiner)


def _computations(eval_config, metrics_specs=None, schema=None):
    return tfma_compat.separate_computations(metric_specs.to_computations(
        list(metrics_specs if metrics_specs is not None else eval_config.metrics_specs),
        eval_config=eval_config, schema=schema))


def supported(eval_config) -> bool:
    """Whether every metric of the config is one `_fill` fills, the slices are on one column or
    none, and nothing asks for confidence intervals, query keys or minimum slice sizes."""
    if (eval_config.options.compute_confidence_intervals.value
            or eval_config.options.min_slice_size.value > 1 or eval_config.cross_slicing_specs
            or any(spec.query_key for spec in eval_config.metrics_specs)):
        return False
    if any(len(s.feature_keys) > 1 or s.feature_values or s.slice_keys_sql
           for s in eval_config.slicing_specs):
        return False
    computations = _computations(eval_config)
    if computations.cross_slice_computations or computations.ci_derived_computations:
        return False
    return all(isinstance(c.combiner, _FILLED) for c in computations.non_derived_computations)


def installed():
    """For the length of the block, TFMA keeps its batches and computes the metrics with
    ComputeMetricsAndPlots (call it inside one Do, where `supported` holds)."""
    return tfma_compat.batches_kept(ComputeMetricsAndPlots)


@beam.ptransform_fn
def ComputeMetricsAndPlots(extracts, eval_config, metrics_specs, eval_shared_models=None,
                           metrics_key=constants.METRICS_KEY, plots_key=constants.PLOTS_KEY,
                           attributions_key=constants.ATTRIBUTIONS_KEY, schema=None,
                           random_seed_for_testing=None):
    """TFMA's _ComputeMetricsAndPlots (same arguments, same outputs) on batched extracts."""
    computations = _computations(eval_config, metrics_specs, schema)
    baseline = next((s.name for s in eval_config.model_specs if s.is_baseline), None)
    combine = tfma_compat.ComputationsCombineFn(
        computations=computations.non_derived_computations)
    results = (extracts
               | "FillAccumulators" >> beam.ParDo(_FillPerSlice(
                   computations.non_derived_computations, eval_config))
               | "MergePerSlice" >> beam.CombinePerKey(_Merged(combine))
               | "AddDerivedAndDiffMetrics" >> tfma_compat.derived_and_diff_metrics(
                   computations.derived_computations, baseline)
               | "RemovePrivateMetrics" >> beam.MapTuple(tfma_compat.remove_private_metrics))
    return {
        metrics_key: results | "FilterByMetrics" >> beam.Map(
            tfma_compat.filter_by_key_type, metric_types.MetricKey),
        plots_key: results | "FilterByPlots" >> beam.Map(
            tfma_compat.filter_by_key_type, metric_types.PlotKey),
        attributions_key: results | "FilterByAttributions" >> beam.Map(
            tfma_compat.filter_by_key_type, metric_types.AttributionsKey),
    }


class _Merged(beam.CombineFn):
    """TFMA's combine of every computation's accumulator, fed accumulators, not examples."""

    def __init__(self, combine: tfma_compat.ComputationsCombineFn):
        self._combine = combine

    def setup(self):
        self._combine.setup()

    def create_accumulator(self):
        return self._combine.create_accumulator()

    def add_input(self, accumulator, filled):
        return self._combine.merge_accumulators([accumulator, filled])

    def merge_accumulators(self, accumulators):
        return self._combine.merge_accumulators(accumulators)

    def compact(self, accumulator):
        return self._combine.compact(accumulator)

    def extract_output(self, accumulator):
        return self._combine.extract_output(accumulator)


class _FillPerSlice(beam.DoFn):
    """One batched extract in, (slice key, every computation's accumulator filled with the rows
    of that slice) out, for each slice its rows fall in."""

    def __init__(self, computations, eval_config):
        self._computations, self._eval_config = computations, eval_config

    def setup(self):
        for computation in self._computations:
            if hasattr(computation.combiner, "setup"):
                computation.combiner.setup()
        self._specs = {s.name if len(self._eval_config.model_specs) > 1 else "": s
                       for s in self._eval_config.model_specs}

    def process(self, extracts):
        models = {name: _model_arrays(extracts, name, spec) for name, spec in self._specs.items()}
        rows = len(next(iter(models.values()))[0])
        for slice_key, mask in _slices(extracts, self._eval_config, rows):
            rows_of = {name: tuple(a[mask] for a in arrays) for name, arrays in models.items()}
            yield slice_key, tuple(
                _fill(c.combiner, c.keys[0], *rows_of[c.keys[0].model_name])
                for c in self._computations)


def _model_arrays(extracts, name: str, spec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels [n], predictions [n, k], weights [n]) of one model, from the batched extracts."""
    def of(value):
        return value[name] if name and isinstance(value, dict) else value

    predictions = of(extracts[constants.PREDICTIONS_KEY])
    if isinstance(predictions, dict):
        predictions = predictions[spec.prediction_key]
    predictions = np.asarray(predictions)
    labels = np.asarray(of(extracts[constants.LABELS_KEY])).reshape(len(predictions))
    weights = np.asarray(of(extracts[constants.EXAMPLE_WEIGHTS_KEY]), np.float32).reshape(-1)
    return labels, predictions.reshape(len(predictions), -1), weights


def _slices(extracts, eval_config, rows: int):
    """(slice key, row mask) for the overall slice and each value of each sliced column, with
    the slice values TFMA's slicer makes (text decoded; a row without a value is in no slice of
    that column)."""
    features = extracts.get(constants.FEATURES_KEY) or {}
    for spec in eval_config.slicing_specs:
        if not spec.feature_keys:
            yield (), np.ones(rows, bool)
            continue
        [column] = spec.feature_keys
        value = features.get(column)
        if value is None:
            continue
        row_of, values = _rows_and_values(value, rows)
        distinct, first, at = np.unique(values, return_index=True, return_inverse=True)
        at = at.reshape(-1)
        for index in np.argsort(first, kind="stable"):  # in the order the values come
            mask = np.zeros(rows, bool)
            mask[row_of[at == index]] = True
            [key] = distinct[index:index + 1].tolist()
            yield ((column, key.decode() if isinstance(key, bytes) else key),), mask


def _rows_and_values(value, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The row of each value and the values of a batched feature (a VarLenTensorValue, a
    sparse value, or a dense [rows] or [rows, 1] array)."""
    if hasattr(value, "indices") and hasattr(value, "values"):
        return np.asarray(value.indices)[:, 0], np.asarray(value.values)
    dense = np.asarray(value).reshape(rows, -1)
    return np.repeat(np.arange(rows), dense.shape[1]), dense.reshape(-1)


def _binarized(key, labels, predictions) -> tuple[np.ndarray, np.ndarray]:
    """The label and prediction of a class_id sub key (1.0 where the label is that class, its
    probability), or the labels and the one prediction column as they are."""
    if key.sub_key is not None and key.sub_key.class_id is not None:
        class_id = key.sub_key.class_id
        return (labels == class_id).astype(np.float64), predictions[:, class_id]
    return labels, predictions[:, 0] if predictions.shape[1] == 1 else predictions


def _fill(combiner, key, labels, predictions, weights) -> Any:
    """`combiner`'s accumulator, filled with the rows as TFMA would fill it example by example
    (the same sums, the same per-batch updates of a Keras metric, the same histogram)."""
    accumulator = combiner.create_accumulator()
    if isinstance(combiner, tfma_compat.ExampleCountCombiner):
        counted = weights if tfma_compat.example_weighted(combiner) else np.ones_like(weights)
        return accumulator + float(np.sum(counted, dtype=np.float64))
    if isinstance(combiner, tfma_compat.CompilableMetricsCombiner):
        return _keras_weights(combiner, accumulator, labels, predictions, weights)
    if isinstance(combiner, tfma_compat.MultiClassConfusionMatrixCombiner):
        return _confusion_matrices(combiner, accumulator, labels, predictions, weights)
    label, prediction = _binarized(key, labels, predictions)
    if isinstance(combiner, tfma_compat.CalibrationHistogramCombiner):
        return _histogram(combiner, label, prediction, weights)
    if isinstance(combiner, tfma_compat.BinaryConfusionMatrixCombiner):
        label, prediction, weight = _fractional(label, prediction, weights,
                                                tfma_compat.binary_fractional_labels(combiner))
        return tfma_compat.add_to_binary_confusion_matrices(
            combiner, accumulator, label.tolist(), prediction.tolist(), weight.tolist())
    if isinstance(combiner, tfma_compat.MeanAbsoluteErrorCombiner):
        error = np.abs(label.astype(np.float32) - prediction.astype(np.float32)).astype(np.float64)
        keep = ~np.isnan(error)
        accumulator.total_regression_error += float(np.sum(error[keep] * weights[keep]))
        accumulator.total_example_weights += float(np.sum(weights[keep], dtype=np.float64))
        return accumulator
    return combiner.add_arrays(accumulator, label.astype(np.float64),
                               prediction.astype(np.float64), weights.astype(np.float64))


def _keras_weights(combiner, accumulator, labels, predictions, weights):
    """A Keras metric's weights after one update on the whole batch, added up as TFMA adds up
    its batches' (labels [n, 1], predictions [n, k], weights [n, 1], as it stacks them)."""
    if not len(labels):
        return accumulator
    for output_index, metric_index, metric in tfma_compat.keras_metrics(combiner):
        metric.reset_states()
        metric.update_state(labels.reshape(-1, 1), predictions, weights.reshape(-1, 1))
        accumulator.add_weights(output_index, metric_index, metric.get_weights())
    return accumulator


def _confusion_matrices(combiner, accumulator, labels, predictions, weights):
    """{threshold: {(actual, predicted): weight}}: the predicted class is the top one, or none
    where its probability is at most the threshold; every row adds its entry, weight 0 too."""
    top = np.argmax(predictions, axis=1)
    top_probability = predictions[np.arange(len(top)), top]
    actual = labels.astype(np.int64)
    for threshold in tfma_compat.confusion_thresholds(combiner):
        predicted = np.where(top_probability <= threshold,
                             multi_class_confusion_matrix_metrics.NO_PREDICTED_CLASS_ID, top)
        matrix = accumulator.setdefault(threshold, {})
        pairs, at = np.unique(np.stack([actual, predicted], axis=1), axis=0, return_inverse=True)
        sums = np.bincount(at.reshape(-1), weights.astype(np.float64), len(pairs))
        for (a, p), total in zip(pairs.tolist(), sums.tolist()):
            entry = multi_class_confusion_matrix_metrics.MatrixEntryKey(a, p)
            matrix[entry] = matrix.get(entry, 0.0) + total
    return accumulator


def _fractional(label, prediction, weights, enabled: bool):
    """TFMA's fractional labels: each row split into (0, p, w(1 - y)) and (1, p, w y), the parts
    of weight 0 dropped; otherwise the rows as they are."""
    label, prediction = label.astype(np.float64), prediction.astype(np.float64)
    weights = weights.astype(np.float64)
    if not enabled:
        return label, prediction, weights
    parts = [(np.zeros_like(label), prediction, weights * (1.0 - label)),
             (np.ones_like(label), prediction, weights * label)]
    return tuple(np.concatenate([part[j][part[2] != 0] for part in parts]) for j in range(3))


def _histogram(combiner, label, prediction, weights):
    """{bucket index: Bucket(Σ w·y, Σ w·p, Σ w)} over the rows' (fractional) labels."""
    buckets = tfma_compat.histogram_buckets(combiner)
    label, prediction, weight = _fractional(label, prediction.astype(np.float64), weights,
                                            buckets.fractional_labels)
    basis = prediction if buckets.by_prediction else label
    index = (basis - buckets.left) / buckets.width * buckets.count + 1
    index = np.where(index < 0, 0, np.where(index >= buckets.count + 1, buckets.count + 1,
                                            np.floor(index))).astype(np.int64)
    accumulator = {}
    for bucket in np.unique(index).tolist():
        rows = index == bucket
        accumulator[bucket] = calibration_histogram.Bucket(
            bucket, float(np.sum(label[rows] * weight[rows])),
            float(np.sum(prediction[rows] * weight[rows])), float(np.sum(weight[rows])))
    return accumulator

