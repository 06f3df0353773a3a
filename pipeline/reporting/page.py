"""The run report: one self-contained HTML page of what a run learned and decided, written at the
end of every run (`<pipeline root>/reports/<run id>.html`) and by `lockstep report [RUN]`.

It opens with the answer, on the first screen: blessed or not and why, the gating metric on
the eval split against its naive baseline and what it needed, the gradient-boosting reference,
the generalisation gap, where the model went. Then the evaluation, the trend, the training, and
last the data (per-feature statistics folded), the schema, anomalies and the components.

It reads the run's own artifacts, found through the RunReport (either runner):
- the data: rows per split, and per feature its type, missing share, mean, spread and range or
  vocabulary size, with a histogram (numbers) or its most frequent values (strings), from
  StatisticsGen; the schema (SchemaGen); anomalies (ExampleValidator);
- the training: the scaling plan the Trainer used and its curve (loss, accuracy, learning rate
  by step) from the TensorBoard events it wrote;
- the evaluation: each gated metric beside its naive baseline (always the majority class, a
  constant score, the label's mean) and LightGBM's gradient boosting on the same split
  (components/gradient_boosting.py), metrics overall and per slice, a calibration plot (binary
  label) or a confusion matrix and per-class recall (more classes), the thresholds from TFMA's
  own eval config, the baseline model, blessed or why not, and where the model went.

Plots are matplotlib's, embedded as inline SVG: the page loads nothing, and opens offline.
"""

from __future__ import annotations

import datetime
import html
import io
import json
import re

from components import fs
from pipeline import definition
from pipeline import split_check
from pipeline.reporting.run_report import (RunReport, asynchronous_text, precision_text,
                                           value_text, verify_line)

HISTOGRAMS_SHOWN = 60  # features with a plot; the table lists them all
TOP_VALUES = 8
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#1d232a}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:8px 0} td,th{padding:3px 10px;border-bottom:1px solid #eaeef2;
text-align:left;vertical-align:middle} th{background:#f6f8fa} td.n{text-align:right;font-variant-numeric:tabular-nums}
.verdict{font-size:16px;padding:8px 12px;border-radius:6px;display:inline-block}
.yes{background:#dafbe1} .no{background:#ffebe9} .muted{color:#57606a} svg{display:block}
#answer{border:1px solid #d0d7de;border-radius:6px;padding:4px 14px;margin-top:8px}
#answer p{margin:6px 0} summary{cursor:pointer;margin:8px 0}
pre{background:#f6f8fa;padding:8px;overflow-x:auto}
"""


def _e(value) -> str:
    return html.escape(str(value))


def _figure(width: float, height: float, columns: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "path", "font.size": 8, "axes.spines.top": False,
                         "axes.spines.right": False, "svg.hashsalt": "lockstep"})
    return plt.subplots(1, columns, figsize=(width, height))


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.tight_layout()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


# ------------------------------------------------------------------------------------------ data

def _statistics(uri: str) -> dict:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    splits = {}
    for path in fs.glob(fs.join(uri, "Split-*", "FeatureStats.pb")):
        split = path.rsplit("/", 2)[-2][len("Split-"):]
        stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(fs.read_bytes(path))
        splits[split] = stats.datasets[0]
    return splits


def _counts(ax, axis) -> None:
    """Counts in few ticks, as 20k or 1.5M, so they never run together."""
    from matplotlib.ticker import EngFormatter, MaxNLocator

    axis = ax.xaxis if axis == "x" else ax.yaxis
    axis.set_major_locator(MaxNLocator(3, integer=True))
    axis.set_major_formatter(EngFormatter(sep=""))


def _histogram(feature) -> str:
    kind = feature.WhichOneof("stats")
    if kind == "num_stats":
        standard = [h for h in feature.num_stats.histograms if h.type == h.STANDARD]
        buckets = standard[0].buckets if standard else []
        if not buckets:
            return ""
        fig, ax = _figure(2.6, 1.1)
        ax.bar([b.low_value for b in buckets], [b.sample_count for b in buckets],
               width=[max(b.high_value - b.low_value, 1e-12) for b in buckets], align="edge",
               color="#4c78a8")
        _counts(ax, "y")
    else:
        top = list(feature.string_stats.top_values)[:TOP_VALUES]
        if not top:
            return ""
        fig, ax = _figure(2.6, 0.45 + 0.15 * len(top))
        labels = [v.value if len(v.value) <= 14 else v.value[:13] + "…" for v in top]
        ax.barh(range(len(top))[::-1], [v.frequency for v in top], color="#f58518", height=0.7)
        ax.set_yticks(range(len(top))[::-1], labels)
        _counts(ax, "x")
    ax.tick_params(labelsize=6)
    return _svg(fig)


def _feature_rows(dataset) -> list[str]:
    rows = []
    for i, feature in enumerate(dataset.features):
        name = ".".join(feature.path.step) or feature.name
        kind = feature.WhichOneof("stats")
        if kind == "num_stats":
            s = feature.num_stats
            common = s.common_stats
            summary = (f"<td class=n>{s.mean:.4g}</td><td class=n>{s.std_dev:.4g}</td>"
                       f"<td class=n>{s.min:.4g} … {s.max:.4g}</td><td></td>")
            kind_name = "int" if feature.type == feature.INT else "float"
        elif kind == "string_stats":
            s = feature.string_stats
            common = s.common_stats
            summary = f"<td></td><td></td><td></td><td class=n>{s.unique}</td>"
            kind_name = "string"
        else:
            continue
        total = common.num_missing + common.num_non_missing
        missing = common.num_missing / total if total else 0.0
        plot = _histogram(feature) if i < HISTOGRAMS_SHOWN else ""
        rows.append(f"<tr><td>{_e(name)}</td><td>{kind_name}</td>"
                    f"<td class=n>{missing:.1%}</td>{summary}<td>{plot}</td></tr>")
    return rows


def _drift_table(drift: dict) -> str:
    """Each measured column's drift from the previous span to the newest, largest first."""
    if not drift:
        return ""
    rows = "".join(
        f"<tr data-drift='{_e(c['column'])}'><td>{_e(c['column'])}</td><td>{_e(c['measure'])}</td>"
        f"<td class=n>{c['score']:.3f}</td><td class=n>{c['bound']:g}</td></tr>"
        for c in drift["columns"])
    return (f"<p>Drift from span {drift['previous']} to span {drift['newest']}, per feature "
            "(JSD over 20 buckets for a number, L-infinity over the values' shares for text; "
            "bounds: data.max_drift, data.feature_drift):</p><table><tr><th>feature</th>"
            f"<th>measure</th><th>score</th><th>bound</th></tr>{rows}</table>")


def _skew_table(report: RunReport) -> str:
    """The split rule, each split's rows and label, and each column's skew between them."""
    parts = []
    if report.split_rule:
        parts.append(f"<p data-split>Split {_e(report.split_words())}.</p>")
    skew = report.skew
    if not skew:
        return "".join(parts)
    label = "; ".join(f"{_e(split)}: " + ", ".join(f"{_e(k)} {v:.3f}" for k, v in values.items())
                      for split, values in skew["label"].items())
    rows = "".join(
        f"<tr data-skew='{_e(c['column'])}'><td>{_e(c['column'])}</td><td>{_e(c['measure'])}</td>"
        f"<td class=n>{c['score']:.3f}</td><td class=n>{c['chance']:.3f}</td>"
        f"<td class=n>{c['bound']:g}</td><td>{'beyond' if c['beyond'] else 'within'}</td></tr>"
        for c in skew["columns"])
    parts.append(
        "<p>Rows: " + ", ".join(f"{_e(k)} {v}" for k, v in skew["rows"].items())
        + f". Label by split: {label}.</p><p>Skew between train and eval, the label first "
        "(SMD: standardized mean difference of a number; L-infinity over the values' shares for "
        "text and classes; chance: what a random split of these sizes gives, one standard "
        "deviation; bound: data.max_skew). A column is beyond only past both the bound and "
        f"{split_check.CHANCE_SDS:g}x chance:</p><table><tr><th>column</th><th>measure</th>"
        f"<th>score</th><th>chance</th><th>bound</th><th></th></tr>{rows}</table>")
    return "".join(parts)


def _data_section(report: RunReport) -> str:
    parts = ["<h2 id=data>Data</h2>"]
    if report.data:
        spans = f", span {', '.join(map(str, report.spans))}" if report.spans else ""
        parts.append(f"<p>From <code>{_e(report.data)}</code>{spans}.</p>")
    parts.append(_skew_table(report))
    if report.analyzed_spans or report.cached_spans:
        parts.append(f"<p data-analysis>Transform analyzed span(s) "
                     f"{_e(', '.join(map(str, report.analyzed_spans)) or 'none')}; from its "
                     f"analyzer cache: {_e(', '.join(map(str, report.cached_spans)) or 'none')}."
                     "</p>")
    parts.append(_drift_table(report.drift))
    uri = report.artifacts.get(f"{definition.STATISTICS_NODE}.statistics")
    if not uri or not fs.is_dir(uri):
        return "".join(parts) + "<p class=muted>No statistics recorded.</p>"
    splits = _statistics(uri)
    parts.append("<table><tr><th>split</th><th>rows</th></tr>" + "".join(
        f"<tr><td>{_e(s)}</td><td class=n data-rows='{_e(s)}'>{d.num_examples}</td></tr>"
        for s, d in splits.items()) + "</table>")
    train = splits.get("train") or next(iter(splits.values()))
    rows = _feature_rows(train)
    parts.append(f"<details data-features><summary>Per feature, on the train split: {len(rows)} "
                 "feature(s), their type, missing share, mean, spread, range or values, and "
                 "distribution</summary><table><tr><th>feature</th>"
                 "<th>type</th><th>missing</th><th>mean</th><th>std</th><th>range</th>"
                 "<th>values</th><th>distribution</th></tr>" + "".join(rows)
                 + "</table></details>")
    return "".join(parts)


def _schema_section(report: RunReport) -> str:
    uri = report.artifacts.get(f"{definition.SCHEMA_NODE}.schema")
    path = fs.join(uri, "schema.pbtxt") if uri else ""
    if not path or not fs.exists(path):
        return "<h2 id=schema>Schema</h2><p class=muted>No schema recorded.</p>"
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = text_format.Parse(fs.read_text(path), schema_pb2.Schema())
    domains = {d.name: len(d.value) for d in schema.string_domain}
    rows = []
    for f in schema.feature:
        presence = f"{f.presence.min_fraction:g}" if f.presence.HasField("min_fraction") else "–"
        domain = f"{domains.get(f.domain, '')} values" if f.domain in domains else ""
        rows.append(f"<tr><td>{_e(f.name)}</td><td>{schema_pb2.FeatureType.Name(f.type)}</td>"
                    f"<td class=n>{presence}</td><td>{_e(domain)}</td></tr>")
    return ("<h2 id=schema>Schema</h2><table><tr><th>feature</th><th>type</th>"
            "<th>min presence</th><th>domain</th></tr>" + "".join(rows) + "</table>")


def _anomalies_section(report: RunReport) -> str:
    uri = report.artifacts.get(f"{definition.VALIDATOR_NODE}.anomalies")
    found = []
    if uri:
        from tensorflow_metadata.proto.v0 import anomalies_pb2

        for path in fs.glob(fs.join(uri, "Split-*", "SchemaDiff.pb")):
            split = path.rsplit("/", 2)[-2][len("Split-"):]
            anomalies = anomalies_pb2.Anomalies.FromString(fs.read_bytes(path))
            for name, info in anomalies.anomaly_info.items():
                found.append(f"<tr><td>{_e(split)}</td><td>{_e(name)}</td>"
                             f"<td>{_e(info.short_description)}</td>"
                             f"<td>{_e(info.description)}</td></tr>")
    body = ("<table><tr><th>split</th><th>feature</th><th>anomaly</th><th>detail</th></tr>"
            + "".join(found) + "</table>") if found else "<p>None: every split fits the schema.</p>"
    return "<h2 id=anomalies>Anomalies</h2>" + body


# -------------------------------------------------------------------------------------- training

def training_curve(model_run_uri: str) -> dict[str, list[tuple[int, float]]]:
    """{scalar name: [(step, value)]} from the Trainer's TensorBoard events."""
    import tensorflow as tf

    curves: dict[str, list[tuple[int, float]]] = {}
    from tensorflow.core.util import event_pb2

    for path in fs.glob(fs.join(model_run_uri, "train", "events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                number = (float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
                          else value.simple_value)
                curves.setdefault(value.tag, []).append((event.step, number))
    return {tag: sorted(points) for tag, points in curves.items()}


def _curve_plot(curves: dict) -> str:
    shown = [tag for tag in ("loss", "accuracy", "rmse", "learning_rate") if curves.get(tag)]
    if not shown:
        return ""
    fig, axes = _figure(3.4 * len(shown), 2.4, len(shown))
    axes = [axes] if len(shown) == 1 else list(axes)
    for ax, tag in zip(axes, shown):
        steps, values = zip(*curves[tag])
        ax.plot(steps, values, color="#4c78a8", linewidth=1.4)
        ax.set_title(tag.replace("_", " "))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    return _svg(fig)


def _training_section(report: RunReport) -> str:
    t = report.training
    if not t:
        return "<h2 id=training>Training</h2><p class=muted>No training summary recorded.</p>"
    plan = t.plan
    rows = [("strategy", t.strategy), ("replicas", t.replicas),
            ("per-replica batch", plan.per_replica_batch),
            ("global batch", plan.global_batch), ("steps", plan.train_steps),
            ("examples", plan.examples), ("budget", plan.budget),
            ("learning rate", f"{plan.learning_rate} (base {plan.base_learning_rate}"
                              f" per {plan.base_batch} examples)"),
            ("warmup steps", plan.warmup_steps),
            ("decay steps", plan.decay_steps),
            ("accumulation steps", plan.accumulation_steps),
            ("precision", precision_text(t) or "float32"),
            ("warm start", t.base_model if t.warm_started else "no"),
            ("model", t.model or "built-in"), ("loss", t.loss or "built-in")]
    if t.verify:
        rows.append(("verified", verify_line(t.verify).split(": ", 1)[1]))
    if t.asynchronous:
        rows.append(("asynchronous", asynchronous_text(t.asynchronous)))
    table = "<table>" + "".join(f"<tr><th>{_e(k)}</th><td data-plan='{_e(k)}'>{_e(v)}</td></tr>"
                                for k, v in rows) + "</table>"
    uri = report.artifacts.get(f"{definition.TRAINER_NODE}.model_run")
    curves = training_curve(uri) if uri and fs.is_dir(uri) else {}
    final = curves.get("loss", [])[-1:] or []
    plot = _curve_plot(curves) or "<p class=muted>No training curve recorded.</p>"
    last = (f"<p>Last logged loss <span data-final-loss>{final[0][1]:.4f}</span> at step "
            f"{final[0][0]}.</p>" if final else "")
    return "<h2 id=training>Training</h2>" + table + plot + last


# ------------------------------------------------------------------------------------ evaluation

def _thresholds(report: RunReport) -> list[str]:
    """The gate, in words, from TFMA's eval config as the Evaluator ran it."""
    from pipeline.reporting.run_report import bound_in_words

    uri = report.artifacts.get(f"{definition.EVALUATOR_NODE}.evaluation")
    path = fs.join(uri, "eval_config.json") if uri else ""
    if not path or not fs.exists(path):
        return []
    from google.protobuf import json_format
    from tensorflow_model_analysis.proto import config_pb2

    stored = json.loads(fs.read_text(path))
    config = json_format.ParseDict(stored.get("evalConfig", stored), config_pb2.EvalConfig(),
                                   ignore_unknown_fields=True)
    lines = []
    for spec in config.metrics_specs:
        for metric in spec.metrics:
            thresholds = [metric.threshold] if metric.HasField("threshold") else []
            thresholds += [t.threshold for t in metric.per_slice_thresholds]
            for threshold in thresholds:
                lines.append(f"{metric.class_name}: {bound_in_words(threshold)}")
    return lines


def _slice_plot(report: RunReport, metric: str) -> str:
    values = [(name, m[metric]) for name, m in report.slice_metrics.items() if metric in m]
    if not values:
        return ""
    fig, ax = _figure(6, 0.35 * len(values) + 0.8)
    ax.barh(range(len(values))[::-1], [v for _, v in values], color="#54a24b")
    ax.set_yticks(range(len(values))[::-1], [n for n, _ in values])
    if metric in report.metrics:
        ax.axvline(report.metrics[metric], color="#333", linestyle="--", linewidth=1)
    ax.set_xlabel(f"{metric} (dashed: the whole eval split)")
    return _svg(fig)


def _gate_table(report: RunReport) -> str:
    """Each gated metric: its value, the gradient-boosting reference's on the same rows (where
    it ran), its naive baseline, the bound it had to reach."""
    reference = report.reference
    rows = []
    for bound in report.gate.bounds if report.gate else ():
        value = report.metrics.get(report.gate.tfma_name(bound.metric))
        naive = (f"{bound.baseline:.4f} ({_e(bound.baseline_words)})"
                 if bound.baseline is not None else "not measured")
        need = ("at least " if bound.higher_is_better else "at most ") + f"{bound.value:.4g}"
        boosted = ""
        if reference is not None:
            figure = reference.metrics.get(bound.metric)
            boosted = (f"<td class=n data-reference-metric='{_e(bound.metric)}'>"
                       f"{'' if figure is None else _e(value_text(bound.metric, figure))}</td>")
        rows.append(f"<tr><td>{_e(bound.metric)}"
                    f"{' (gating)' if bound.metric == report.gate.metric else ''}</td>"
                    f"<td class=n data-gate-metric='{_e(bound.metric)}'>"
                    f"{'' if value is None else f'{value:.4f}'}</td>{boosted}<td>{naive}</td>"
                    f"<td>{need}{' (eval.bounds)' if bound.explicit else ''}</td></tr>")
    if not rows:
        return ""
    note = (f"<p class=muted data-reference>{_e(report.reference_line())}</p>"
            if reference is not None else "")
    return ("<h3>Against the naive baseline</h3><table><tr><th>metric</th><th>model</th>"
            + (f"<th>{_e(reference.name)}</th>" if reference is not None else "")
            + "<th>naive baseline</th><th>needed</th></tr>" + "".join(rows) + "</table>" + note)


def _calibration_plot(report: RunReport) -> str:
    buckets = report.plots.get("calibration")
    if not buckets:
        return ""
    positive = report.class_name(1)
    fig, ax = _figure(4.2, 3.6)
    ax.plot([0, 1], [0, 1], color="#999", linestyle="--", linewidth=1)
    ax.scatter([b[4] for b in buckets], [b[3] for b in buckets],
               s=[12 + 200 * b[2] / max(x[2] for x in buckets) for b in buckets], color="#4c78a8")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel(f"mean predicted P({positive})")
    ax.set_ylabel(f"share that is {positive}")
    return (f"<h3>Calibration (positive class '{_e(positive)}')</h3>"
            "<p class=muted>Eval examples in ten buckets of predicted probability; dot size: "
            "examples; on the dashed line the predictions are calibrated.</p>" + _svg(fig))


def _confusion(report: RunReport) -> str:
    matrix = report.plots.get("confusion")
    if not matrix:
        return ""
    ids = sorted({c for pair in matrix for c in pair if c >= 0})
    names = [report.class_name(c) for c in ids]
    recall = report.per_class_recall()
    table = ("<h3>Confusion matrix</h3><table><tr><th>actual \\ predicted</th>"
             + "".join(f"<th>{_e(n)}</th>" for n in names) + "<th>recall</th></tr>" + "".join(
                 f"<tr><th>{_e(report.class_name(a))}</th>" + "".join(
                     f"<td class=n>{matrix.get((a, p), 0):.0f}</td>" for p in ids)
                 + f"<td class=n data-recall='{_e(report.class_name(a))}'>"
                 f"{recall.get(report.class_name(a), 0.0):.4f}</td></tr>" for a in ids)
             + "</table>")
    fig, ax = _figure(0.5 * len(ids) + 2.5, 0.5 * len(ids) + 2)
    counts = [[matrix.get((a, p), 0) for p in ids] for a in ids]
    ax.imshow(counts, cmap="Blues")
    ax.set_xticks(range(len(ids)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(ids)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("actual")
    return table + _svg(fig)


def _evaluation_section(report: RunReport) -> str:
    parts = ["<h2 id=evaluation>Evaluation</h2>"]
    parts.append(f"<p>Baseline: {_e(report.baseline) if report.baseline else 'none (first model)'}"
                 "</p>")
    parts.append(_gate_table(report))
    if report.generalization_line():
        g = report.generalization
        beyond = "beyond" if g["beyond"] or g["optimistic"] else "within"
        parts.append(f"<p data-generalization={beyond}>"
                     f"{_e(report.generalization_line())}</p>")
    if report.metrics:
        parts.append("<table><tr><th>metric</th><th>value</th></tr>" + "".join(
            f"<tr><td>{_e(k)}</td><td class=n data-metric='{_e(k)}'>{_e(value_text(k, v))}</td></tr>"
            for k, v in sorted(report.metrics.items())) + "</table>")
    parts.append(_calibration_plot(report) + _confusion(report))
    thresholds = _thresholds(report)
    if thresholds:
        parts.append("<p>Thresholds (TFMA's eval config):</p><ul>"
                     + "".join(f"<li>{_e(t)}</li>" for t in thresholds) + "</ul>")
    if report.slice_metrics:
        names = sorted({k for m in report.slice_metrics.values() for k in m})
        parts.append("<h3>By slice</h3><table><tr><th>slice</th>" + "".join(
            f"<th>{_e(n)}</th>" for n in names) + "</tr>" + "".join(
            f"<tr><td>{_e(s)}</td>" + "".join(
                f"<td class=n data-slice='{_e(s)}' data-slice-metric='{_e(n)}'>"
                f"{m[n]:.4f}</td>" if n in m else "<td></td>" for n in names) + "</tr>"
            for s, m in report.slice_metrics.items()) + "</table>")
        gate = report.gate.tfma_name() if report.gate else None
        if gate:
            parts.append(_slice_plot(report, gate))
    return "".join(parts)


def _trend_section(report: RunReport, history: list[RunReport]) -> str:
    """The gating metric of each run's model and of the serving model on that run's eval rows,
    newest first, and the two over time."""
    points = [(r, r.versus_serving()) for r in history]
    points = [(r, v) for r, v in points if v and report.gate and v["metric"] == report.gate.metric]
    if len(points) < 2:
        return ""
    rows = "".join(
        f"<tr><td>{_e(r.run_id)}</td><td class=n data-trend-model='{_e(r.run_id)}'>"
        f"{v['model']:.4f}</td><td class=n>"
        f"{'' if v['serving'] is None else format(v['serving'], '.4f')}</td>"
        f"<td>{'pushed' if r.pushed_to else 'not pushed'}</td></tr>" for r, v in points)
    metric = points[0][1]["metric"]
    fig, ax = _figure(6, 2.6)
    ordered = points[::-1]
    ax.plot(range(len(ordered)), [v["model"] for _, v in ordered], marker="o", color="#4c78a8",
            label="the run's model")
    served = [(i, v["serving"]) for i, (_, v) in enumerate(ordered) if v["serving"] is not None]
    if served:
        ax.plot([i for i, _ in served], [s for _, s in served], marker="s", color="#e45756",
                label="the serving model, on the same rows")
    ax.set_xlabel("run (oldest to newest)")
    ax.set_ylabel(metric)
    ax.legend(loc="best")
    return ("<h2 id=trend>Trend</h2><p class=muted>Each run's model and the model serving when it "
            f"ran, scored on that run's eval split ({_e(metric)}), newest first.</p>"
            f"<table><tr><th>run</th><th>model</th><th>serving model</th><th></th></tr>{rows}"
            "</table>" + _svg(fig))


# ------------------------------------------------------------------------------------------ page

def _gate_answer(report: RunReport) -> str:
    """The gating metric on the eval split against its naive baseline and what it needed:
    "accuracy 0.9710 on the eval split against 0.4419 for always 'Adelie' (the naive baseline,
    measured on the whole table); needed at least 0.4519"."""
    gate = report.gate
    if not gate:
        return "<p data-answer-gate class=muted>No gate recorded (the run ended before it).</p>"
    bound = next((b for b in gate.bounds if b.metric == gate.metric), None)
    value = report.metrics.get(gate.tfma_name())
    figure = "not measured" if value is None else f"<b>{_e(value_text(gate.metric, value))}</b>"
    naive = ""
    if bound is not None and bound.baseline is not None:
        where = ", measured on the whole table" if gate.naive_measured() else ""
        naive = (f" against {bound.baseline:.4f} for {_e(bound.baseline_words)} (the naive "
                 f"baseline{where})")
    need = ""
    if bound is not None:
        need = (f"; needed {'at least' if bound.higher_is_better else 'at most'} "
                f"{bound.value:.4g}{' (eval.bounds)' if bound.explicit else ''}")
    lines = [f"<p data-answer-gate>{_e(gate.metric)} {figure} on the eval split (the gating "
             f"metric){naive}{need}</p>"]
    versus = report.versus_serving()
    if versus and versus["serving"] is not None:
        lines.append(f"<p data-answer-serving>The serving model on the same rows: "
                     f"{versus['serving']:.4f} ({versus['model'] - versus['serving']:+.4f})</p>")
    return "".join(lines)


def _answer(report: RunReport) -> str:
    """What a reader comes for, on the first screen: blessed or not and why, the gating metric
    against its baseline, the gradient-boosting reference, the generalisation gap, where the
    model went."""
    parts = [_verdict(report), _gate_answer(report)]
    if report.reference_line():
        parts.append(f"<p data-answer-reference>{_e(report.reference_line())}</p>")
    else:
        parts.append("<p data-answer-reference class=muted>Reference: gradient boosting was not "
                     "measured in this run.</p>")
    if report.generalization_line():
        g = report.generalization
        beyond = "beyond" if g["beyond"] or g["optimistic"] else "within"
        parts.append(f"<p data-answer-generalization={beyond}>"
                     f"{_e(report.generalization_line())}</p>")
    parts.append(_push(report))
    links = " · ".join(f"<a href='#{k}'>{w}</a>" for k, w in (
        ("evaluation", "evaluation"), ("training", "training"), ("data", "data"),
        ("schema", "schema"), ("anomalies", "anomalies"), ("components", "components")))
    return (f"<section id=answer data-answer>{''.join(parts)}</section>"
            f"<p class=muted>Below: {links}.</p>")


def _verdict(report: RunReport) -> str:
    if report.blessed:
        verdict = "<span class='verdict yes' data-blessed=yes>Blessed</span>"
    elif report.blessed is False:
        why = "; ".join(report.failures) or "a threshold was not met"
        verdict = (f"<span class='verdict no' data-blessed=no>Not blessed</span> "
                   f"<span data-why>{_e(why)}</span>")
    else:
        verdict = "<span class='verdict no' data-blessed=unknown>No verdict</span>"
    return f"<p>{verdict}</p>"


def _push(report: RunReport) -> str:
    if report.pushed_to:
        push = f"Model pushed to <code data-pushed>{_e(report.pushed_to)}</code>"
    else:
        push = "Model not pushed" + (f": {_e(report.push_note)}" if report.push_note else "")
    return f"<p data-push>{push}</p>"


def _components(report: RunReport) -> str:
    return ("<h2 id=components>Components</h2><table><tr><th>component</th><th>state</th>"
            "<th>seconds</th></tr>" + "".join(
                f"<tr><td>{_e(n.node)}</td><td>{_e(n.state)}</td><td class=n>{n.seconds:.1f}</td></tr>"
                for n in report.nodes) + "</table>")


def render(report: RunReport, history: list[RunReport] = ()) -> str:
    """history: the pipeline root's runs, newest first (this one among them), for the trend."""
    started = (datetime.datetime.fromtimestamp(report.started, datetime.timezone.utc)
               .strftime("%Y-%m-%d %H:%M:%S UTC") if report.started else "")
    head = (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<title>lockstep run {_e(report.run_id)}</title><style>{CSS}</style></head><body>")
    title = (f"<h1>lockstep run <span data-run-id>{_e(report.run_id)}</span></h1>"
             f"<p class=muted>{_e(started)}{' · task ' + _e(report.task) if report.task else ''}"
             "</p>")
    # The answer first; then how it was reached; the data's statistics and the run's parts last.
    sections = [_answer(report), _evaluation_section(report), _trend_section(report, list(history)),
                _training_section(report), _data_section(report), _schema_section(report),
                _anomalies_section(report), _components(report)]
    return head + title + "".join(sections) + "</body></html>\n"


def file_name(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_id or "run") + ".html"


def write(report: RunReport, directory: str, history: list[RunReport] = ()) -> str:
    """Writes the page under directory (components/fs.py: whole, or not at all); returns its
    path."""
    fs.makedirs(directory)
    path = fs.join(directory, file_name(report.run_id))
    fs.write_text(path, render(report, history))
    return path
