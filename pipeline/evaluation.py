"""What the Evaluator measures and what a model must reach to be blessed.

Metrics by task, all computed by TFMA on the eval split (unlabeled examples weigh 0):
- binary label: accuracy, AUC, precision, recall and log loss of the positive class (the rarer
  class, index 1 of the label vocabulary), and a calibration plot; AUC is exact, from the ranks
  of the scores (components/metrics.py), not TFMA's histogram of thresholds;
- more classes: accuracy, log loss and a confusion matrix (per-class recall is read from it);
- regression: RMSE, MAE and R².

The gate (`Gate`): the gating metric (`eval.metric`; auto: AUC for a binary label, accuracy for
more classes, RMSE for a regression) must beat its naive baseline, measured from the data before
the run, by `eval.margin`; every classifier must also be no worse than always answering the
majority class (and a binary one no worse than a constant score, AUC 0.5). An explicit bound in
`eval.bounds` wins over a baseline. The gating metric is also compared with the baseline model's
(`eval.max_regression`) and recorded at push.
"""

from __future__ import annotations

import dataclasses
import math

from pipeline.config import ConfigError, EvalConfig
from trainer_module import features
from trainer_module.settings import CLASSIFICATION, REGRESSION


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # lockstep's name: eval.metric, eval.bounds, the summary
    higher_is_better: bool
    task: str
    binary_only: bool = False


METRICS = {m.name: m for m in (
    Metric("accuracy", True, CLASSIFICATION),
    Metric("auc", True, CLASSIFICATION, binary_only=True),
    Metric("log_loss", False, CLASSIFICATION),
    Metric("rmse", False, REGRESSION),
    Metric("mae", False, REGRESSION),
    Metric("r2", True, REGRESSION),
)}


def tfma_name(metric: str, binary: bool) -> str:
    """The name TFMA gives a metric's value (components/evaluator.read_metrics keys)."""
    return {"accuracy": "sparse_categorical_accuracy", "auc": "auc",
            "log_loss": "binary_crossentropy" if binary else "sparse_categorical_crossentropy",
            "rmse": "root_mean_squared_error", "mae": "mean_absolute_error",
            "r2": "r_squared"}[metric]


@dataclasses.dataclass(frozen=True)
class Bound:
    metric: str
    value: float  # at least this (higher is better) or at most this
    baseline: float | None  # the naive baseline's value on the data (None: not measured)
    baseline_words: str  # what the naive baseline does: "always 'no'"
    explicit: bool  # from eval.bounds

    @property
    def higher_is_better(self) -> bool:
        return METRICS[self.metric].higher_is_better

    def words(self) -> str:
        need = "at least" if self.higher_is_better else "at most"
        if self.explicit:
            return f"{need} {self.value:.4g} (eval.bounds)"
        return f"{need} {self.value:.4g} ({self.baseline:.4g} for {self.baseline_words})"


@dataclasses.dataclass(frozen=True)
class Gate:
    task: str
    metric: str  # the gating metric: compared with the baseline model, recorded at push
    bounds: tuple[Bound, ...]
    classes: tuple[str, ...] = ()  # the label's values, most frequent first (local data)
    # How much better the model may do on a sample of its train split than on the eval split
    # before the summary names the gap (components/generalization.py; eval.max_gap)
    max_gap: float = 0.05
    # eval.beat_reference: the gating metric must also reach the gradient-boosting reference's
    # on the same split, less eval.margin (`margin`; reference_bound)
    beat_reference: bool = False
    margin: float = 0.0

    @property
    def binary(self) -> bool:
        return len(self.classes) == 2

    def tfma_name(self, metric: str | None = None) -> str:
        return tfma_name(metric or self.metric, self.binary)

    def to_dict(self) -> dict:
        return {"task": self.task, "metric": self.metric, "classes": list(self.classes),
                "bounds": [dataclasses.asdict(b) for b in self.bounds], "max_gap": self.max_gap,
                "beat_reference": self.beat_reference, "margin": self.margin}

    @classmethod
    def from_dict(cls, values: dict) -> "Gate":
        return cls(values["task"], values["metric"], tuple(Bound(**b) for b in values["bounds"]),
                   tuple(values["classes"]), values.get("max_gap", cls.max_gap),
                   values.get("beat_reference", False), values.get("margin", 0.0))

    def naive_measured(self) -> bool:
        """Whether a bound carries a naive figure measured on the data (the whole table, before
        the split: a class's share, the label's spread), not one true of any data (AUC 0.5)."""
        return any(not b.explicit and b.baseline is not None and b.metric not in ("auc", "r2")
                   for b in self.bounds)

    def reference_words(self) -> str:
        """What eval.beat_reference asks, or ""."""
        if not self.beat_reference:
            return ""
        share = " of it" if self.metric in RELATIVE_MARGIN else ""
        return (f"{self.metric} no worse than gradient boosting's on the same split by more than "
                f"{self.margin:g}{share} (eval.beat_reference)")


def _naive(metric: str, counts: dict[str, int], label_std: float | None
           ) -> tuple[float | None, str]:
    """The metric's value for a model that ignores the features, and what that model does."""
    total = sum(counts.values())
    if metric == "accuracy" and total:
        majority, count = max(counts.items(), key=lambda kv: kv[1])
        return count / total, f"always '{majority}'"
    if metric == "auc":
        return 0.5, "a constant score"
    if metric == "log_loss" and total:
        return -sum(c / total * math.log(c / total) for c in counts.values() if c), \
            "predicting the class shares"
    if metric == "rmse" and label_std:
        return label_std, "always the mean"
    if metric == "r2":
        return 0.0, "always the mean"
    return None, ""


RELATIVE_MARGIN = ("rmse",)  # eval.margin is a share of the figure it is taken from


def _past(metric: str, baseline: float, margin: float) -> float:
    if metric in RELATIVE_MARGIN:
        return baseline * (1 - margin)
    return baseline + margin if METRICS[metric].higher_is_better else baseline - margin


def decide(config: EvalConfig, task: str, label_counts: dict[str, int] | None = None,
           label_std: float | None = None, where: str = "") -> Gate:
    """The gate for this task on this data (label_counts, label_std from the check before the
    run; None for data that was not read, e.g. remote). Raises ConfigError naming the key."""
    counts = label_counts or {}
    binary = len(counts) == 2
    metric = config.metric
    if metric == "auto":
        metric = {REGRESSION: "rmse"}.get(task, "auc" if binary else "accuracy")
    known = [m.name for m in METRICS.values() if m.task == task]
    for name in [metric, *config.bounds]:
        key = "eval.metric" if name == metric and name not in config.bounds else f"eval.bounds.{name}"
        if name not in known:
            raise ConfigError(f"{key}: {name!r} is not a metric of a {task} (one of "
                              f"{', '.join(known)})")
        if METRICS[name].binary_only and counts and not binary:
            raise ConfigError(f"{key}: {name} needs a binary label, and '{where}' has "
                              f"{len(counts)} classes")
    gated = [metric]
    if task == CLASSIFICATION:
        gated += ["accuracy"] + (["auc"] if binary else [])
    gated += list(config.bounds)
    bounds = []
    for name in dict.fromkeys(gated):  # each once, the gating metric first
        baseline, words = _naive(name, counts, label_std)
        if name in config.bounds:
            value = config.bounds[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"eval.bounds.{name} must be a number, got {value!r}")
            bounds.append(Bound(name, float(value), baseline, words, True))
        elif baseline is None:
            raise ConfigError(
                f"eval.bounds.{name}: no naive baseline for {name} was measured "
                f"({'the data is not read before the run' if not counts and not label_std else 'none is defined'}); "
                f"set a bound, e.g. eval.bounds = {{{name} = ...}}")
        else:
            margin = config.margin if name == metric else 0.0  # floors: no worse than naive
            bounds.append(Bound(name, round(_past(name, baseline, margin), 6), baseline, words,
                                False))
    return Gate(task, metric, tuple(bounds), tuple(counts) if task == CLASSIFICATION else (),
                config.max_gap, config.beat_reference, config.margin)


def reference_bound(gate: Gate):
    """eval.beat_reference's bound for the Evaluator (components/evaluator.py): the gating
    metric no worse than the gradient-boosting reference's by more than eval.margin."""
    from components.evaluator import ReferenceBound

    return ReferenceBound(gate.metric, gate.tfma_name(), METRICS[gate.metric].higher_is_better,
                          gate.margin, relative=gate.metric in RELATIVE_MARGIN)


def eval_config(gate: Gate, label: str, slices: list[str], max_regression: float):
    """TFMA's EvalConfig for this gate: the task's metrics and plots, the bounds as value
    thresholds, the gating metric's allowed drop against the baseline model."""
    from tensorflow_model_analysis.proto import config_pb2 as tfma

    def metric(class_name: str, name: str, **config) -> tfma.MetricConfig:
        import json

        found = next((b for b in gate.bounds if gate.tfma_name(b.metric) == name), None)
        result = tfma.MetricConfig(class_name=class_name,
                                   config=json.dumps(config) if config else "")
        if class_name in ("RSquared", "ExactAUC", "ClippedBinaryCrossEntropy"):
            result.module = "components.metrics"
        if found is None:
            return result
        direction = (tfma.MetricDirection.HIGHER_IS_BETTER if found.higher_is_better
                     else tfma.MetricDirection.LOWER_IS_BETTER)
        value = (tfma.GenericValueThreshold(lower_bound={"value": found.value})
                 if found.higher_is_better
                 else tfma.GenericValueThreshold(upper_bound={"value": found.value}))
        threshold = tfma.MetricThreshold(value_threshold=value)
        if found.metric == gate.metric:
            threshold.change_threshold.CopyFrom(tfma.GenericChangeThreshold(
                direction=direction,
                absolute={"value": -max_regression if found.higher_is_better else max_regression}))
        if slices:  # a MetricConfig's threshold holds on every slice; the gate is on the whole
            result.per_slice_thresholds.append(tfma.PerSliceMetricThreshold(
                slicing_specs=[tfma.SlicingSpec()], threshold=threshold))
        else:
            result.threshold.CopyFrom(threshold)
        return result

    counts = [metric("ExampleCount", "example_count"),
              metric("WeightedExampleCount", "weighted_example_count")]
    if gate.task == REGRESSION:
        specs = [tfma.MetricsSpec(metrics=counts + [
            metric("RootMeanSquaredError", "root_mean_squared_error"),
            metric("MeanAbsoluteError", "mean_absolute_error"),
            metric("RSquared", "r_squared")])]
        prediction_key = "predictions"
    else:
        specs = [tfma.MetricsSpec(metrics=counts + [
            metric("SparseCategoricalAccuracy", "sparse_categorical_accuracy")] + ([] if gate.binary else [
                metric("SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"),
                metric("MultiClassConfusionMatrixPlot", "multi_class_confusion_matrix_plot")]))]
        if gate.binary:  # the positive class: the label vocabulary's index 1, the rarer class
            specs.append(tfma.MetricsSpec(
                binarize=tfma.BinarizationOptions(class_ids={"values": [1]}),
                metrics=[metric("ExactAUC", "auc"), metric("Precision", "precision"),
                         metric("Recall", "recall"),
                         metric("ClippedBinaryCrossEntropy", "binary_crossentropy"),
                         metric("CalibrationPlot", "calibration_plot", num_buckets=10)]))
        prediction_key = "probabilities"
    return tfma.EvalConfig(
        # model_type named, TFMA otherwise loads each model once more to find out what it is;
        # tf_generic: TFMA calls the signatures, as a model server does, and does not rebuild the
        # Keras model to look for compiled metrics (the config lists every metric).
        model_specs=[tfma.ModelSpec(signature_name="serving_default", model_type="tf_generic",
                                    label_key=features.transformed_name(label),
                                    prediction_key=prediction_key,
                                    example_weight_key=features.EVAL_WEIGHT,
                                    preprocessing_function_names=["transform_features"])],
        slicing_specs=[tfma.SlicingSpec()] + [tfma.SlicingSpec(feature_keys=[column])
                                              for column in slices],
        metrics_specs=specs)
