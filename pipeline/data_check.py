"""The check before a run: the data path, its CSV files, the label column and each column's type.

It reads the CSVs with the same rules and code as the ExampleGen (components/csv_format.py: Arrow
record batches, a byte range at a time), so bad input fails here in seconds, with one line naming
the file and column, before anything is written; memory stays bounded by one batch.
"""

from __future__ import annotations

import dataclasses
import glob
import os

import pyarrow as pa
import pyarrow.compute as pc

from components import csv_format, row_split, spans
from pipeline import column_roles, split_check
from pipeline.config import DataConfig
from trainer_module import features, settings


LABEL_VALUES_COUNTED = 100_000  # far past any class count; bounds memory for a numeric label


# An integer label with more distinct values than this is a regression target (a count, a price
# in dollars, a year), not classes: a softmax over hundreds of classes with a few examples each
# learns little, and the values are ordered. Below it (grades, ratings, codes) it is classes.
# `--task` or `data.task` overrides the rule either way.
MAX_INTEGER_CLASSES = 50


def task_for_label(kind: str, distinct_values: int) -> tuple[str, str]:
    """(task, why) for a label column of this kind (int | float | string) and distinct count."""
    if kind == "float":
        return settings.REGRESSION, "float label"
    if kind == "string":
        return settings.CLASSIFICATION, f"string label, {distinct_values} classes"
    if distinct_values > MAX_INTEGER_CLASSES:
        return settings.REGRESSION, (f"integer label with {distinct_values} distinct values, "
                                     f"more than {MAX_INTEGER_CLASSES}")
    return settings.CLASSIFICATION, f"integer label, {distinct_values} classes"

@dataclasses.dataclass(frozen=True)
class DataInfo:
    input_base: str  # the directory ExampleGen reads
    pattern: str  # the file pattern inside it
    files: tuple[str, ...]
    columns: dict[str, str]  # column -> int | float | string
    rows: int
    task: str  # classification | regression
    task_reason: str  # why: from the label's type and values, or the user's choice
    spans: tuple[int, ...] = ()  # the spans this run reads, when the data comes in spans
    label_std: float | None = None  # a numeric label's standard deviation (None: text)
    # How many rows hold each label value (as its text), for a label of at most
    # LABEL_VALUES_COUNTED values: the classes and their shares.
    label_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    # Every column but the label: what it is to the model, and why (pipeline/column_roles.py).
    roles: dict[str, column_roles.Role] = dataclasses.field(default_factory=dict)
    # Each split's cells as the ExampleGen will split them (pipeline/split_check.py); None when
    # data.max_skew is 0.
    split_tally: split_check.Tally | None = None
    # {feature: rows} of the built-in model's embedding tables (column_roles.Profile.table_rows)
    table_rows: dict[str, int] = dataclasses.field(default_factory=dict)


class _Moments:
    """Count, sum and sum of squares of a numeric column, batch by batch (vectorized)."""

    def __init__(self):
        self.n, self.total, self.squares, self.numeric = 0, 0.0, 0.0, True

    def add(self, values) -> None:
        if not self.numeric:
            return
        try:
            numbers = pc.cast(values.drop_null(), pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            self.numeric = False
            return
        self.n += len(numbers)
        self.total += pc.sum(numbers).as_py() or 0.0
        self.squares += pc.sum(pc.multiply(numbers, numbers)).as_py() or 0.0

    def std(self) -> float | None:
        if not self.numeric or self.n < 2:
            return None
        mean = self.total / self.n
        return max(self.squares / self.n - mean * mean, 0.0) ** 0.5


def _files(path: str, span_pattern: str, span_window: int,
           span_marker: str) -> tuple[str, str, list[str], list[int]]:
    chosen: list[int] = []
    input_base, pattern = csv_format.locate(path, span_pattern)
    if span_pattern:
        if not os.path.isdir(path):
            raise csv_format.CsvError(f"{path}: data.span_pattern needs data.path to be a directory")
        try:
            chosen, files = spans.select(path, span_pattern, span_window, glob.glob,
                                         span_marker, os.path.exists)
        except spans.SpanError as err:
            raise csv_format.CsvError(str(err)) from None
    elif os.path.isfile(path):
        files = [path]
    else:
        files = sorted(glob.glob(os.path.join(input_base, pattern)))
        if not files:
            raise csv_format.CsvError(f"{path}: the directory has no .csv file")
    return input_base, pattern, files, chosen


def _checked_header(file: str, header: list[str], label: str, split_by) -> list[str]:
    for one, other in features.collisions(header)[:1]:
        raise csv_format.CsvError(
            f"{file}: columns '{one}' and '{other}' would share the feature name "
            f"'{features.safe_name(one)}' (letters, digits and _ only): rename one")
    if label not in header:
        raise csv_format.CsvError(
            f"{file}: label column '{label}' is not in the header ({', '.join(header)})")
    try:
        row_split.check_keys(split_by, label, header, file)
    except row_split.SplitKeyError as err:
        raise csv_format.CsvError(str(err)) from None
    return header


def check(config: DataConfig) -> DataInfo:
    """Reads the CSVs the config names (the complete spans of its window, if in spans) once.

    config.task: auto (decide from the label column) or classification | regression (the
    user's); config.columns: {column: role} over the roles read from the data.
    Raises:
      CsvError, SpanError: the file, column or span, named.
    """
    path = os.path.abspath(os.path.expanduser(config.path))
    label, missing_values, task = config.label, config.missing_values, config.task
    if not os.path.exists(path):
        raise csv_format.CsvError(f"{path}: no such file or directory")
    input_base, pattern, files, chosen = _files(path, config.span_pattern, config.span_window,
                                                config.span_marker)
    missing = csv_format.missing_tokens(missing_values)
    header = None
    rows, profiles = 0, None
    labels: dict[str, int] = {}  # the label's values and rows (up to LABEL_VALUES_COUNTED values)
    moments = _Moments()
    profile, tally = None, None
    rule = row_split.SplitRule((config.train_buckets, config.eval_buckets),
                               tuple(config.split_by), config.split_seed)
    for file in files:
        file_header, data_offset = csv_format.read_header(file)
        if header is None:
            header = _checked_header(file, file_header, label, config.split_by)
            profile = column_roles.Profile(header)
            if config.max_skew:
                tally = split_check.Tally(header, rule, input_base)
        elif file_header != header:
            raise csv_format.CsvError(f"{file}: its header differs from {files[0]}'s")
        for read in csv_format.plan_reads(file, data_offset):
            for first_row, batch in csv_format.numbered_batches(read, header):
                rows += batch.num_rows
                cleaned = csv_format.clean(batch, missing)
                if tally is not None:
                    tally.add(cleaned, file, read.start, first_row)
                profiles = csv_format.merge_profiles(
                    p for p in (profiles, csv_format.profile_batch(cleaned)) if p)
                profile.add(cleaned, [p.floats > 0 for p in profiles])
                values = cleaned.column(header.index(label))
                moments.add(values)
                if len(labels) < LABEL_VALUES_COUNTED:
                    counts = pc.value_counts(values.drop_null())
                    for value, count in zip(counts.field("values").to_pylist(),
                                            counts.field("counts").to_pylist()):
                        labels[value] = labels.get(value, 0) + count
    if not rows:
        raise csv_format.CsvError(f"{files[0]}: the CSV has a header but no data rows")
    where = files[0] if len(files) == 1 else path
    types = csv_format.column_types(header, profiles, where, files, missing_values)
    if len(types) < 2:
        raise csv_format.CsvError(f"{where}: no feature columns besides the label '{label}'")
    if task == "auto":
        task, why = task_for_label(types[label], len(labels))
    else:
        why = "set by --task or data.task"
    if task == settings.REGRESSION and types[label] == csv_format.STRING:
        raise csv_format.CsvError(f"{where}: label column '{label}' holds text, and a regression "
                                  "needs numbers (use --task classification)")
    std = moments.std() if types[label] != csv_format.STRING else None
    try:
        roles = profile.roles(types, label, config.columns, where, config.min_count,
                              config.max_vocabulary)
    except ValueError as err:
        raise csv_format.CsvError(str(err)) from None
    if not any(r.role in (column_roles.FEATURE, column_roles.TIMESTAMP) for r in roles.values()):
        raise csv_format.CsvError(f"{where}: every column but the label is an id or a constant "
                                  "(set data.columns to keep one as a feature)")
    counts = labels if task == settings.CLASSIFICATION else {}
    if task == settings.CLASSIFICATION and len(counts) < 2:
        raise csv_format.CsvError(f"{where}: label column '{label}' has one value "
                                  f"({next(iter(counts), '')!r}): there is nothing to classify")
    return DataInfo(input_base, pattern, tuple(files), types, rows, task, why, tuple(chosen),
                    std, dict(sorted(counts.items(), key=lambda kv: -kv[1])), roles, tally,
                    profile.table_rows(types, roles, config.max_vocabulary))

