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

Plots are inline SVG (plots.py, drawn by svg_chart.py): the page loads nothing, and opens offline.
The page is cut in four: what it reads from the artifacts (run_artifacts.py), its figures (plots.py),
its data sections (data_sections.py) and the rest of the page here; markup.py escapes its text.
"""

from __future__ import annotations

import datetime
import re

from components import fs
from pipeline import definition
from pipeline.reporting import data_sections, plots, run_artifacts
from pipeline.reporting.markup import CSS, e as _e
from pipeline.reporting.run_report import RunReport
from pipeline.reporting.summary_text import (asynchronous_text, precision_text, value_text,
                                             verify_line)


# ------------------------------------------------------------------------------------------ data


# -------------------------------------------------------------------------------------- training


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
    curves = run_artifacts.training_curve(uri) if uri and fs.is_dir(uri) else {}
    final = curves.get("loss", [])[-1:] or []
    plot = plots.curves(curves) or "<p class=muted>No training curve recorded.</p>"
    last = (f"<p>Last logged loss <span data-final-loss>{final[0][1]:.4f}</span> at step "
            f"{final[0][0]}.</p>" if final else "")
    return "<h2 id=training>Training</h2>" + table + plot + last


# ------------------------------------------------------------------------------------ evaluation


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


def _slice_plot(report: RunReport, metric: str) -> str:
    values = [(name, m[metric]) for name, m in report.slice_metrics.items() if metric in m]
    return plots.slice_bars(values, report.metrics.get(metric), metric) if values else ""


def _calibration_plot(report: RunReport) -> str:
    buckets = report.plots.get("calibration")
    if not buckets:
        return ""
    positive = report.class_name(1)
    return (f"<h3>Calibration (positive class '{_e(positive)}')</h3>"
            "<p class=muted>Eval examples in ten buckets of predicted probability; dot size: "
            "examples; on the dashed line the predictions are calibrated.</p>"
            + plots.calibration(buckets, positive))


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
    return table + plots.confusion([[matrix.get((a, p), 0) for p in ids] for a in ids], names)


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
    thresholds = run_artifacts.thresholds(
        report.artifacts.get(f"{definition.EVALUATOR_NODE}.evaluation"))
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
    return ("<h2 id=trend>Trend</h2><p class=muted>Each run's model and the model serving when it "
            f"ran, scored on that run's eval split ({_e(metric)}), newest first.</p>"
            f"<table><tr><th>run</th><th>model</th><th>serving model</th><th></th></tr>{rows}"
            "</table>" + plots.trend([v for _, v in points[::-1]], metric))


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
                _training_section(report), data_sections.data_section(report),
                data_sections.schema_section(report), data_sections.anomalies_section(report),
                _components(report)]
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
