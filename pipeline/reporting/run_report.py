"""What a pipeline run did, in the words the summary prints, whichever orchestrator ran it.

Each runner collects, per node, its state, its seconds and its output artifacts (output key, URI,
properties): the local runner from ML Metadata, the kfp-local runner from each task's executor
output. `build` turns that into one RunReport, so both print the same summary.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from components import evaluator, fs, generalization, gradient_boosting, latest_model, pusher
from components import row_split, transform
from components.csv_example_gen import SPANS_KEY, SPLIT_KEY
from pipeline import evaluation
from pipeline.node_ids import (BASELINE_NODE, EVALUATOR_NODE, EXAMPLE_GEN_NODE, PUSHER_NODE,
                               REFERENCE_NODE, TRAINER_NODE, TRANSFORM_NODE)
from trainer_module import features
from pipeline.reporting.summary_text import (asynchronous_text, bound_in_words, input_line,
                                             metric_text, precision_parts, resume_line,
                                             stopping_lines, value_text, verify_line)
from trainer_module.summary import SUMMARY_FILE, TrainingSummary


@dataclasses.dataclass
class NodeReport:
    node: str
    state: str  # executed | cached | failed | ...
    seconds: float
    start_seconds: float | None = None  # kfp-local: process start to the executor's Do


@dataclasses.dataclass(frozen=True)
class Output:
    """One output artifact of a node: its output key, URI and (custom) properties."""

    key: str
    uri: str
    properties: dict[str, Any]


SLICES_SHOWN = 12  # slices in the summary; all of them are in `lockstep runs --json`


@dataclasses.dataclass
class RunReport:
    nodes: list[NodeReport]
    metrics: dict[str, float]
    blessed: bool | None
    pushed_to: str | None
    spans: list[int] = dataclasses.field(default_factory=list)  # the spans the examples came from
    baseline: str | None = None  # the pushed model the Evaluator compared with
    training: TrainingSummary | None = None  # the Trainer's (trainer_module/summary.py)
    task: str = ""  # classification | regression, and why
    failures: list[str] = dataclasses.field(default_factory=list)  # why not blessed
    slice_metrics: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    run_id: str = ""  # the orchestrator's id of the run
    data: str = ""  # where ExampleGen read
    started: float = 0.0  # Unix time the run began
    push_note: str = ""  # the Pusher's word: pushed as version N, or why not
    artifacts: dict[str, str] = dataclasses.field(default_factory=dict)  # "Node.key": its URI
    gate: evaluation.Gate | None = None  # what a model had to reach (pipeline/evaluation.py)
    classes: list[str] = dataclasses.field(default_factory=list)  # the label vocabulary, in order
    plots: dict = dataclasses.field(default_factory=dict)  # components/evaluator.read_plots
    # Transform's analysis of a span window: the spans it analyzed and those from its cache
    analyzed_spans: list[int] = dataclasses.field(default_factory=list)
    cached_spans: list[int] = dataclasses.field(default_factory=list)
    cache_passed_over: str = ""  # why Transform read no analyzer cache (a damaged one)
    drift: dict = dataclasses.field(default_factory=dict)  # preflight.DriftCheck.to_dict()
    # The ExampleGen's split rule (components/row_split.py, SplitRule.to_dict), from its output
    split_rule: dict = dataclasses.field(default_factory=dict)
    skew: dict = dataclasses.field(default_factory=dict)  # split_check.SkewCheck.to_dict()
    # The model's metrics on a sample of each split (components/generalization.py), from its
    # blessing: {split: {rows, metrics}}
    figures: dict = dataclasses.field(default_factory=dict)
    # What scikit-learn's HistGradientBoosting reached on this split (components/
    # gradient_boosting.py), or None (a run before it, or one that stopped before it ran)
    reference: gradient_boosting.Reference | None = None

    def versus_reference(self) -> dict | None:
        """The gradient-boosting reference's figures (Reference.to_dict) with `value`, its gating
        metric's, and `model`, this run's model's on the same eval split (None: not measured);
        or None without a reference."""
        if self.reference is None:
            return None
        name = evaluation.tfma_name(self.reference.metric, bool(self.gate and self.gate.binary))
        return {**self.reference.to_dict(), "sampled": self.reference.sampled,
                "value": self.reference.value,
                "model": self.metrics.get(name)}

    def reference_line(self) -> str:
        """"Reference: LightGBM 4.7.0 (its defaults) on this split: auc 0.9012 (fit on 41,536
        train rows in 0.8 s); this model 0.9031", or "". A fit that failed its checks says why
        instead of a figure (components/gradient_boosting.py)."""
        versus = self.versus_reference()
        if versus is None:
            return ""
        model = ("" if versus["model"] is None or versus["value"] is None
                 else f"; this model {value_text(versus['metric'], versus['model'])}")
        gate = " (the gate: eval.beat_reference)" if self.gate and self.gate.beat_reference else ""
        return (f"Reference: {self.reference.booster()} on this split: "
                f"{self.reference.words()}{model}{gate}")

    @property
    def generalization(self) -> dict:
        """The gating metric on the train sample beside the eval split's and the gap between
        them (generalization.gap), or {}."""
        if not self.gate or not self.figures:
            return {}
        return generalization.gap(self.figures, self.gate.metric,
                                  evaluation.METRICS[self.gate.metric].higher_is_better,
                                  self.gate.max_gap)

    def generalization_line(self) -> str:
        g = self.generalization
        if not g:
            return ""
        rows = g["rows"]
        relative = " of the eval figure" if g["metric"] in generalization.RELATIVE else ""
        if g["beyond"]:
            verdict = (f"BEYOND {g['bound']:g}: the model does better on rows it learned from than "
                       "on new ones (overfitting, or a split that is not random)")
        elif g["optimistic"]:
            verdict = (f"BEYOND {g['bound']:g} the other way: the eval figure is better than the "
                       "train rows get, so it may not hold on new rows (a few extreme rows weigh "
                       f"heavily in {g['metric']}, or the splits differ)")
        else:
            verdict = f"within {g['bound']:g}"
        return (f"Generalisation: {g['metric']} {g['train']:.4f} on {rows.get('train', 0)} train "
                f"rows vs {g['eval']:.4f} on {rows.get('eval', 0)} eval rows, gap "
                f"{g['gap']:+.4f}{relative} ({verdict}; eval.max_gap)")

    def split_words(self) -> str:
        """"by row position (never by the label), seed 0, train 4 : eval 1 buckets", or ""."""
        return row_split.SplitRule.from_dict(self.split_rule).words() if self.split_rule else ""

    def class_name(self, class_id: int) -> str:
        return self.classes[class_id] if 0 <= class_id < len(self.classes) else str(class_id)

    def per_class_recall(self) -> dict[str, float]:
        """{class: recall} from the confusion matrix (more than two classes)."""
        matrix = self.plots.get("confusion") or {}
        actual: dict[int, float] = {}
        for (truth, _), count in matrix.items():
            actual[truth] = actual.get(truth, 0.0) + count
        return {self.class_name(c): matrix.get((c, c), 0.0) / n
                for c, n in sorted(actual.items()) if n and c >= 0}

    def versus_serving(self) -> dict | None:
        """{metric, model, serving}: the gating metric of this run's model and of the serving
        model it was compared with, both on this run's eval split (serving None: first model)."""
        if not self.gate or self.gate.tfma_name() not in self.metrics:
            return None
        name = self.gate.tfma_name()
        diff = self.metrics.get(f"{name} (baseline diff)")
        model = self.metrics[name]
        return {"metric": self.gate.metric, "model": model,
                "serving": None if diff is None else model - diff}

    def gate_lines(self) -> list[str]:
        """Each gated metric beside its naive baseline: "accuracy 0.6641 vs 0.6190 for always
        'no' (needs at least 0.6290)"; the positive class of a binary label; per-class recall."""
        if not self.gate:
            return []
        lines = []
        for bound in self.gate.bounds:
            value = self.metrics.get(self.gate.tfma_name(bound.metric))
            if value is None:
                continue
            versus = (f" vs {bound.baseline:.4f} for {bound.baseline_words}"
                      if bound.baseline is not None else "")
            need = "at least" if bound.higher_is_better else "at most"
            lines.append(f"  {bound.metric} {value:.4f}{versus} (needs {need} {bound.value:.4g}"
                         f"{', eval.bounds' if bound.explicit else ''})"
                         + ("  <- gating metric" if bound.metric == self.gate.metric else ""))
        versus = self.versus_serving()
        if versus and versus["serving"] is not None:
            lines.append(f"  {versus['metric']} {versus['model']:.4f} vs {versus['serving']:.4f} "
                         f"for the serving model on the same rows "
                         f"({versus['model'] - versus['serving']:+.4f})")
        if self.gate.binary and len(self.classes) == 2:
            shown = [metric_text(name, self.metrics[name]) for name in ("precision", "recall")
                     if name in self.metrics]
            lines.append(f"  positive class '{self.classes[1]}': " + ", ".join(shown))
        recall = self.per_class_recall()
        if recall:
            lines.append("  recall by class: " + ", ".join(f"{k} {v:.4f}" for k, v in recall.items()))
        header = ("Eval against the naive baseline (the model on the eval split; the naive "
                  "figure measured on the whole table, before the split):"
                  if self.gate.naive_measured() else "Eval against the naive baseline:")
        return [header] + lines if lines else []

    def describe(self, with_nodes: bool = True) -> str:
        lines = [f"Task: {self.task}"] if self.task else []
        if self.split_rule:
            lines.append(f"Split: {self.split_words()}")
        if with_nodes:
            lines.append("Components:")
            for n in self.nodes:
                start = f"  (start-up {n.start_seconds:.1f}s)" if n.start_seconds is not None else ""
                lines.append(f"  {n.node:<20} {n.state:<9} {n.seconds:6.1f}s{start}")
        if self.spans:
            analysis = ""
            if self.analyzed_spans or self.cached_spans:
                analysis = (f" (Transform analyzed {_span_list(self.analyzed_spans) or 'nothing'}"
                            + (f"; {_span_list(self.cached_spans)} from its analyzer cache"
                               if self.cached_spans else "")
                            + (f"; {self.cache_passed_over}" if self.cache_passed_over else "")
                            + ")")
            lines.append("Data: span " + ", ".join(map(str, self.spans)) + analysis)
        if self.training:
            t = self.training
            lines.append(f"Trainer: {t.strategy} on {t.replicas} replica(s), "
                         f"{t.plan.train_steps} steps of global batch {t.plan.global_batch} "
                         f"({t.plan.budget or 'budget not recorded'})"
                         + "".join(f", {part}" for part in precision_parts(t))
                         + (f", warm-started from {t.base_model}" if t.warm_started else ""))
            lines += [f"Warning: {w}" for w in t.plan.warnings]  # the plan's (scaling.py)
            if t.input_fingerprint:
                lines.append(input_line(t))
            if t.sharded_tables:
                lines.append("Sharded tables: " + "; ".join(table.words()
                                                           for table in t.sharded_tables))
            lines.extend(stopping_lines(t))
            if t.not_warm_started:
                lines.append(f"Warm start: {t.not_warm_started}")
            if t.resumed_at or t.unreadable_checkpoints:
                lines.append(resume_line(t))
            if t.asynchronous:
                lines.append("Asynchronous: " + asynchronous_text(t.asynchronous))
            if t.model or t.loss:
                lines.append(f"Model: {t.model or 'built-in'}, loss {t.loss or 'built-in'} "
                             "(your code)")
            if t.verify:
                lines.append(verify_line(t.verify))
        lines.append(f"Baseline: the serving model, {self.baseline}" if self.baseline
                     else "Baseline: none (first model)")
        lines += self.gate_lines()
        if self.reference_line():
            lines.append(self.reference_line())
        if self.generalization_line():
            lines.append(self.generalization_line())
        if self.metrics:
            lines.append("Eval metrics: " + ", ".join(
                metric_text(k, v) for k, v in sorted(self.metrics.items())))
        if self.slice_metrics:
            shown = list(self.slice_metrics.items())[:SLICES_SHOWN]
            more = len(self.slice_metrics) - len(shown)
            lines.append("Eval by slice: " + "; ".join(
                f"{name} " + ", ".join(f"{k} {v:.4f}" if k != "example_count" else f"n={v:.0f}"
                                       for k, v in sorted(values.items()))
                for name, values in shown) + (f"; and {more} more (lockstep runs --json)"
                                              if more > 0 else ""))
        if self.blessed or not self.failures:
            lines.append(f"Blessed: {'yes' if self.blessed else 'no'}")
        else:
            lines.append("Blessed: no: " + "; ".join(self.failures))
        if self.pushed_to:
            lines.append(f"Model pushed to: {self.pushed_to}")
        else:
            lines.append("Model not pushed" + (f": {self.push_note}" if self.push_note else ""))
        return "\n".join(lines)


def _span_list(spans: list[int]) -> str:
    if not spans:
        return ""
    return ("span " if len(spans) == 1 else "spans ") + ", ".join(map(str, spans))


def _ints(value) -> list[int]:
    return [int(x) for x in str(value or "").split(",") if x.strip()]


def build(nodes: list[NodeReport], outputs: dict[str, list[Output]]) -> RunReport:
    """The report of a run whose nodes had these outputs ({node id: its output artifacts})."""
    metrics, blessed, pushed_to, plots, figures = {}, None, None, {}, {}
    failures: list[str] = []
    held_back: list[str] = []  # eval.beat_reference: the reference's bound, not TFMA's
    slice_metrics: dict[str, dict[str, float]] = {}
    for out in outputs.get(EVALUATOR_NODE, []):
        if out.key == "evaluation":
            metrics, slice_metrics = evaluator.read_metrics(out.uri)
            plots = evaluator.read_plots(out.uri)
            failures = _read_failures(out.uri)
        elif out.key == "blessing":
            blessed = bool(int(out.properties.get("blessed", 0)))
            if out.properties.get(evaluator.REFERENCE_FAILURE_KEY):
                held_back = [out.properties[evaluator.REFERENCE_FAILURE_KEY]]
            if out.properties.get(generalization.FIGURES_KEY):
                figures = json.loads(out.properties[generalization.FIGURES_KEY])
    push_note, gate = "", None
    for out in outputs.get(PUSHER_NODE, []):
        if out.properties.get(pusher.GATE_KEY):
            gate = evaluation.Gate.from_dict(json.loads(out.properties[pusher.GATE_KEY]))
        if int(out.properties.get(pusher.PUSHED_KEY, 0)):
            pushed_to = out.properties.get(pusher.DESTINATION_KEY)
        push_note = out.properties.get(pusher.NOTE_KEY) or ""
    spans, baseline, training, split_rule = [], None, None, {}
    for out in outputs.get(EXAMPLE_GEN_NODE, []):
        if out.properties.get(SPLIT_KEY):
            split_rule = json.loads(out.properties[SPLIT_KEY])
        if out.properties.get(SPANS_KEY):
            spans = [int(x) for x in str(out.properties[SPANS_KEY]).split(",")]
    for out in outputs.get(BASELINE_NODE, []):
        if int(out.properties.get(latest_model.FOUND_KEY, 0)):
            baseline = out.properties.get(latest_model.SOURCE_KEY)
        if out.properties.get(latest_model.PASSED_OVER_KEY):  # a corrupt newer version
            baseline = (f"{baseline}; " if baseline else "none; ") + \
                out.properties[latest_model.PASSED_OVER_KEY]
    for out in outputs.get(TRAINER_NODE, []):
        summary = fs.join(out.uri, SUMMARY_FILE)
        if out.key == "model_run" and fs.exists(summary):
            training = TrainingSummary.from_dict(json.loads(fs.read_text(summary)))
    reference = None
    for out in outputs.get(REFERENCE_NODE, []):
        if out.key == "reference":
            reference = gradient_boosting.read(out.uri)
    classes, analyzed, cached, cache_passed_over = [], [], [], ""
    for out in outputs.get(TRANSFORM_NODE, []):
        if out.key == "transform_graph":
            analyzed = _ints(out.properties.get(transform.ANALYZED_SPANS_KEY))
            cached = _ints(out.properties.get(transform.CACHED_SPANS_KEY))
            cache_passed_over = out.properties.get(transform.CACHE_PASSED_OVER_KEY) or ""
        vocab = fs.join(out.uri, "transform_fn", "assets", features.LABEL_VOCAB)
        if out.key == "transform_graph" and fs.exists(vocab):
            classes = fs.read_text(vocab).splitlines()
    return RunReport(nodes, metrics, blessed, pushed_to, spans, baseline, training,
                     failures=failures + held_back, slice_metrics=slice_metrics,
                     push_note=push_note,
                     artifacts={f"{node}.{out.key}": out.uri
                                for node, outs in outputs.items() for out in outs},
                     gate=gate, classes=classes, plots=plots, analyzed_spans=analyzed,
                     cached_spans=cached, cache_passed_over=cache_passed_over,
                     split_rule=split_rule, figures=figures,
                     reference=reference)


def _read_failures(uri: str) -> list[str]:
    """Why the Evaluator did not bless: each failed metric, its value and what it had to be."""
    import tensorflow_model_analysis as tfma

    try:
        result = tfma.load_validation_result(uri)
    except Exception:  # noqa: BLE001  no validations file: nothing to explain
        return []
    lines = []
    for per_slice in result.metric_validations_per_slice:
        where = (" on slice " + evaluator.slice_name(per_slice.slice_key)
                 if per_slice.slice_key.single_slice_keys else "")
        for failure in per_slice.failures:
            name = failure.metric_key.name + (" (diff vs baseline)"
                                              if failure.metric_key.is_diff else "")
            value = failure.metric_value.double_value.value
            lines.append(f"{name} {value:.4f}{where}, needs {bound_in_words(failure.metric_threshold)}")
    if result.missing_thresholds:
        lines.append("a metric with a threshold was not computed")
    return lines
