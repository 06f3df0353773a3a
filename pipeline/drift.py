"""Drift between spans: is the newest complete span distributed like the one before it?

Measured before the run, from the CSVs, with TFDV's two drift measures:
- a numeric column: the Jensen-Shannon divergence (base 2, so 0 to 1) of its histograms in the two
  spans, over the same 20 equal-width buckets spanning both;
- a text column: the L-infinity distance, the largest change in any value's share.
Missing cells count as a value of their own (a column that empties out drifts). Ids are not
measured; nor is a timestamp, or a column with one value in each span (a year, a batch number),
which move with time by nature. A column that was constant in the run's window is measured: a
text column that collapses to one value in the newest span is a broken export.

A column whose score passes `data.max_drift` (or its own bound in `data.feature_drift`) stops the
run before anything runs, with one line naming the columns and scores.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from components import csv_format, spans
from pipeline.config import DataConfig
from pipeline.column_roles import CONSTANT, FEATURE

BUCKETS = 20


@dataclasses.dataclass(frozen=True)
class Drift:
    column: str
    measure: str  # "JSD" | "L-inf"
    score: float
    bound: float

    @property
    def beyond(self) -> bool:
        return self.score > self.bound

    def words(self) -> str:
        return f"{self.column} ({self.measure} {self.score:.3f} > {self.bound:g})"


def _columns(files: list[str], header: list[str], missing: pa.Array, names: list[str]):
    """{column: ChunkedArray of its cleaned cells (nulls: missing)} over the files."""
    chunks: dict[str, list[pa.Array]] = {name: [] for name in names}
    for file in files:
        _, offset = csv_format.read_header(file)
        for read in csv_format.plan_reads(file, offset):
            for batch in csv_format.record_batches(read, header):
                cleaned = csv_format.clean(batch, missing)
                for name in names:
                    chunks[name].append(cleaned.column(header.index(name)))
    return {name: pa.chunked_array(c, pa.string()) for name, c in chunks.items()}


def _numeric_shares(values: pa.ChunkedArray, edges: np.ndarray) -> np.ndarray:
    numbers = pc.cast(values.drop_null(), pa.float64()).to_numpy()
    counts = np.histogram(numbers, edges)[0].astype(float)
    counts = np.append(counts, values.null_count)
    return counts / max(counts.sum(), 1.0)


def _jsd(p: np.ndarray, q: np.ndarray) -> float:
    m = (p + q) / 2
    term = lambda a: float(np.sum(a[a > 0] * np.log2(a[a > 0] / m[a > 0])))  # noqa: E731 - one line
    return max(0.0, (term(p) + term(q)) / 2)


def _text_shares(values: pa.ChunkedArray) -> dict:
    counts = pc.value_counts(values)
    total = len(values) or 1
    return {v: c / total for v, c in zip(counts.field("values").to_pylist(),
                                         counts.field("counts").to_pylist())}


def between_spans(data, config: DataConfig) -> tuple[tuple[int, int], list[Drift]] | None:
    """((previous span, newest span), each measured column's Drift), or None when the data is
    not in spans or the newest complete span has no complete span before it.

    Args:
      data: the data check's DataInfo; config: the data settings (label, missing-value tokens,
        span pattern and marker, max_drift and feature_drift).
    """
    label, missing_values, span_pattern, span_marker, max_drift, feature_drift = (
        config.label, config.missing_values, config.span_pattern, config.span_marker,
        config.max_drift, config.feature_drift)
    if not data.spans:
        return None
    found = spans.find(data.input_base, span_pattern, glob=_glob)
    complete = sorted(n for n, files in found.items()
                      if spans.is_complete(files, span_marker, _exists))
    newest = data.spans[-1]
    earlier = [n for n in complete if n < newest]
    if not earlier:
        return None
    previous = earlier[-1]
    header, _ = csv_format.read_header(found[newest][0])
    names = [c for c, r in data.roles.items() if r.role in (FEATURE, CONSTANT) and c != label]
    missing = csv_format.missing_tokens(missing_values)
    new = _columns(found[newest], header, missing, names)
    old = _columns(found[previous], header, missing, names)
    drifts = []
    for name in names:
        if pc.count_distinct(old[name]).as_py() <= 1 and pc.count_distinct(new[name]).as_py() <= 1:
            continue  # one value per span: it names the span
        bound = float(feature_drift.get(name, max_drift))
        if data.columns[name] == csv_format.STRING:
            p, q = _text_shares(old[name]), _text_shares(new[name])
            score = max(abs(p.get(v, 0.0) - q.get(v, 0.0)) for v in set(p) | set(q))
            drifts.append(Drift(name, "L-inf", score, bound))
            continue
        both = pa.chunked_array(old[name].chunks + new[name].chunks, pa.string()).drop_null()
        if not len(both):
            continue
        low, high = (v.as_py() for v in pc.min_max(pc.cast(both, pa.float64())).values())
        edges = np.linspace(low, high if high > low else low + 1.0, BUCKETS + 1)
        score = _jsd(_numeric_shares(old[name], edges), _numeric_shares(new[name], edges))
        drifts.append(Drift(name, "JSD", score, bound))
    return (previous, newest), sorted(drifts, key=lambda d: -d.score)


def _glob(pattern: str) -> list[str]:
    import glob

    return glob.glob(pattern)


def _exists(path: str) -> bool:
    import os

    return os.path.exists(path)
