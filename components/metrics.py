"""lockstep's own TFMA metrics, for what TFMA 0.46 lacks or only approximates:

- `RSquared` (r_squared): 1 - Σw(y - ŷ)² / Σw(y - ȳ)², ȳ the weighted mean label; TFMA has none.
- `ExactAUC` (auc): the area under the ROC curve from the ranks of the scores, ties counted half
  (the Mann-Whitney statistic, weighted), what roc_auc_score gives on the served model's scores.
  TFMA's AUC sums a histogram of 10,000 fixed thresholds: a confident model's scores crowd into
  its first and last buckets, where it is off by a point or more (penguins: 0.948 for 0.964).
  It keeps each example's score (12 bytes), so memory grows with the eval split.

- `ClippedBinaryCrossEntropy` (binary_crossentropy): the weighted mean log loss of the positive
  class's probability, clipped to [1e-7, 1 - 1e-7] as Keras clips it. TFMA's BinaryCrossEntropy
  computes 0 * log(0) for a probability of exactly 1 (a confident model in float32 gives it), and
  reports NaN where the served model's log loss is finite.

The Evaluator's config names them by this module (pipeline/evaluation.py), so TFMA imports it
in whichever process runs the Evaluator.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types, metric_util


def _computations(combiner):
    def computations(name=None, eval_config=None, model_name=None, output_name=None,
                     example_weighted=False, sub_key=None, aggregation_type=None,
                     class_weights=None, preprocessors=None):
        key = metric_types.MetricKey(name=name, model_name=model_name, output_name=output_name,
                                     sub_key=sub_key, example_weighted=example_weighted)
        return [metric_types.MetricComputation(
            keys=[key], preprocessors=preprocessors,
            combiner=combiner(key, eval_config, example_weighted))]
    return computations


class _Combiner(beam.CombineFn):
    def __init__(self, key, eval_config, example_weighted):
        self._key, self._eval_config, self._weighted = key, eval_config, example_weighted

    def _examples(self, element):
        """(label, prediction, weight) as floats, for each labeled example of the element."""
        for label, prediction, weight in metric_util.to_label_prediction_example_weight(
                element, eval_config=self._eval_config, model_name=self._key.model_name,
                output_name=self._key.output_name, sub_key=self._key.sub_key,
                example_weighted=self._weighted):
            y = float(np.asarray(label).reshape(-1)[0])
            w = float(np.asarray(weight).reshape(-1)[0])
            if w and np.isfinite(y):
                yield y, float(np.asarray(prediction).reshape(-1)[0]), w

    def add_input(self, accumulator, element):
        rows = np.array(list(self._examples(element)), np.float64).reshape(-1, 3)
        return self._add_rows(accumulator, rows[:, 0], rows[:, 1], rows[:, 2])

    def add_arrays(self, accumulator, labels, predictions, weights):
        """add_input for a whole batch of rows (components/batched_metrics.py): the same rows
        as _examples keeps, labeled and weighted."""
        keep = (weights != 0) & np.isfinite(labels)
        return self._add_rows(accumulator, labels[keep], predictions[keep], weights[keep])

    def _add_rows(self, accumulator, y, prediction, w):
        """The accumulator with the rows (float64 arrays of labels, predictions, weights) added."""
        raise NotImplementedError


class _RSquaredCombiner(_Combiner):
    """Accumulates [Σw, Σwy, Σwy², Σw(y - ŷ)²]."""

    def create_accumulator(self):
        return np.zeros(4)

    def _add_rows(self, accumulator, y, prediction, w):
        return accumulator + (w.sum(), (w * y).sum(), (w * y * y).sum(),
                              (w * (y - prediction) ** 2).sum())

    def merge_accumulators(self, accumulators):
        return np.sum(list(accumulators), axis=0)

    def extract_output(self, accumulator):
        weight, total, squares, errors = accumulator
        spread = squares - total * total / weight if weight else 0.0
        return {self._key: 1.0 - errors / spread if spread > 0 else float("nan")}


class RSquared(metric_types.Metric):
    def __init__(self, name: str = "r_squared"):
        super().__init__(metric_util.merge_per_key_computations(
            _computations(_RSquaredCombiner)), name=name)


class _AUCCombiner(_Combiner):
    """Accumulates each example's (score, label, weight)."""

    def create_accumulator(self):
        return []

    def _add_rows(self, accumulator, y, prediction, w):
        accumulator.extend(zip(y.tolist(), prediction.tolist(), w.tolist()))
        return accumulator

    def merge_accumulators(self, accumulators):
        return [row for accumulator in accumulators for row in accumulator]

    def extract_output(self, accumulator):
        return {self._key: exact_auc(*np.array(accumulator, dtype=np.float64).reshape(-1, 3).T)}


def exact_auc(labels, scores, weights) -> float:
    """P(a positive scores above a negative), ties half, each example weighted."""
    positive = labels > 0.5
    distinct, at = np.unique(scores, return_inverse=True)
    pos = np.bincount(at, weights * positive, len(distinct))
    neg = np.bincount(at, weights * ~positive, len(distinct))
    total_pos, total_neg = pos.sum(), neg.sum()
    if not total_pos or not total_neg:
        return float("nan")
    below = np.cumsum(neg) - neg  # negative weight at strictly lower scores
    return float(np.sum(pos * (below + 0.5 * neg)) / (total_pos * total_neg))


class ExactAUC(metric_types.Metric):
    def __init__(self, name: str = "auc"):
        super().__init__(metric_util.merge_per_key_computations(
            _computations(_AUCCombiner)), name=name)


EPSILON = 1e-7  # Keras' epsilon: log loss of a probability clipped to [EPSILON, 1 - EPSILON]


def log_loss(labels, probabilities):
    """Each example's log loss (labels 0 or 1, the positive class's probabilities), clipped."""
    p = np.clip(np.asarray(probabilities, np.float64), EPSILON, 1.0 - EPSILON)
    return -(labels * np.log(p) + (1.0 - labels) * np.log(1.0 - p))


class _LogLossCombiner(_Combiner):
    """Accumulates [Σw, Σw·loss]."""

    def create_accumulator(self):
        return np.zeros(2)

    def _add_rows(self, accumulator, y, prediction, w):
        return accumulator + (w.sum(), (w * log_loss(y, prediction)).sum())

    def merge_accumulators(self, accumulators):
        return np.sum(list(accumulators), axis=0)

    def extract_output(self, accumulator):
        weight, loss = accumulator
        return {self._key: loss / weight if weight else float("nan")}


class ClippedBinaryCrossEntropy(metric_types.Metric):
    def __init__(self, name: str = "binary_crossentropy"):
        super().__init__(metric_util.merge_per_key_computations(
            _computations(_LogLossCombiner)), name=name)


metric_types.register_metric(RSquared)
metric_types.register_metric(ClippedBinaryCrossEntropy)
metric_types.register_metric(ExactAUC)
