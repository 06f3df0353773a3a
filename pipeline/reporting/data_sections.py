"""The run report's data sections (pipeline/reporting/page.py places them): the split, its rows
and skew, drift between spans, per-feature statistics with their distributions, the schema and
the anomalies."""

from __future__ import annotations

from components import fs
from pipeline import definition, split_check
from pipeline.reporting import plots, run_artifacts
from pipeline.reporting.markup import e as _e
from pipeline.reporting.run_report import RunReport

HISTOGRAMS_SHOWN = 60  # features with a plot; the table lists them all


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
        plot = plots.histogram(feature) if i < HISTOGRAMS_SHOWN else ""
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


def data_section(report: RunReport) -> str:
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
    splits = run_artifacts.statistics(uri)
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


def schema_section(report: RunReport) -> str:
    schema = run_artifacts.schema(report.artifacts.get(f"{definition.SCHEMA_NODE}.schema"))
    if schema is None:
        return "<h2 id=schema>Schema</h2><p class=muted>No schema recorded.</p>"
    from tensorflow_metadata.proto.v0 import schema_pb2

    domains = {d.name: len(d.value) for d in schema.string_domain}
    rows = []
    for f in schema.feature:
        presence = f"{f.presence.min_fraction:g}" if f.presence.HasField("min_fraction") else "–"
        domain = f"{domains.get(f.domain, '')} values" if f.domain in domains else ""
        rows.append(f"<tr><td>{_e(f.name)}</td><td>{schema_pb2.FeatureType.Name(f.type)}</td>"
                    f"<td class=n>{presence}</td><td>{_e(domain)}</td></tr>")
    return ("<h2 id=schema>Schema</h2><table><tr><th>feature</th><th>type</th>"
            "<th>min presence</th><th>domain</th></tr>" + "".join(rows) + "</table>")


def anomalies_section(report: RunReport) -> str:
    found = [f"<tr><td>{_e(split)}</td><td>{_e(name)}</td><td>{_e(short)}</td>"
             f"<td>{_e(description)}</td></tr>" for split, name, short, description in
             run_artifacts.anomalies(report.artifacts.get(f"{definition.VALIDATOR_NODE}.anomalies"))]
    body = ("<table><tr><th>split</th><th>feature</th><th>anomaly</th><th>detail</th></tr>"
            + "".join(found) + "</table>") if found else "<p>None: every split fits the schema.</p>"
    return "<h2 id=anomalies>Anomalies</h2>" + body
