"""What each column is to the model, decided once before the run beside the task: a feature, an
id, a constant or a timestamp. Ids and constants are left out of the model, timestamps are parsed
into parts (trainer_module/preprocessing.py), and `data.columns` overrides any of it.

- **constant**: one distinct value in every present cell: nothing to learn from.
- **id**: a text or integer column whose present values are (nearly) all distinct: a row number,
  a sequential key, a hash, a name per row. An integer column must also be a near-dense range
  (row numbers, sequential keys): an integer measurement that happens to be unique per row stays
  a feature, and so does any float column (a coordinate, an amount).
- **timestamp**: a text column whose every present cell is a date, ISO 8601's or as people
  write it, all cells in one form, its order read from the cells (pipeline/written_dates.py).
  `data.columns = {col = "timestamp:dmy"}` names the order (ymd, mdy, dmy), and
  "timestamp:epoch" reads a numeric column as seconds since 1970.

- **coded float** (a feature): a float column of at most features.CODE_TOP_K distinct values,
  each seen in CODED_ROWS_PER_VALUE rows or more on average, whose values lie apart on the
  finest decimal place they are written to (a rate from a table, a fee: a median gap of at
  least CODED_GAP steps between neighbouring values): besides its number, each value is
  embedded as a code, as an integer column's is (its values are levels a model should tell
  apart exactly, where the number's piecewise-linear encoding blurs neighbours: loans' interest
  rate names its grade). A float that fills its grid (a weight in hundredths, a delay in whole
  minutes) is a measurement, a number only: a code a value would let the model learn each
  value's rows by heart. `data.columns = {col = "feature"}` keeps a coded one a number only.
- **large categorical** (a feature): a text or integer column with more than
  features.VOCABULARY_TOP_K distinct values that repeat (user or item ids): it keeps every value
  seen at least data.min_count times, up to data.max_vocabulary, its rare values in hash buckets
  (trainer_module/preprocessing.py); the run says how many of each.

The profile reads the same cleaned Arrow batches as the data check (no Python per row). It
counts each value of the text and integer columns exactly, over all batches
(pipeline/value_counts.py), so a distinct count is never a sum over batches; a float column's
values (as written) are counted while they are at most features.CODE_TOP_K, and no longer once
they are more.
"""

from __future__ import annotations

import dataclasses
import decimal
import math

import pyarrow as pa
import pyarrow.compute as pc

from components.csv_format import FLOAT, INT, STRING
from pipeline.value_counts import ValueCounts
from pipeline.written_dates import ORDER_WORDS, WrittenDates
from trainer_module.features import (CODE_TOP_K, EPOCH, HASH_BUCKETS, HASHED_TOP_K,
                                     MAX_VOCABULARY, MIN_COUNT, OOV_BUCKETS, ORDERS,
                                     VOCABULARY_TOP_K, YMD, code_name, transformed_name)

ID_DISTINCT_SHARE = 0.99  # distinct / present values at or above this: every row its own value
ID_RANGE_SLACK = 1.5  # an integer id spans at most this times its distinct count (a sequence)
ID_MIN_VALUES = 20  # fewer present values say nothing about uniqueness
# A text column with at least this many distinct values, at least this share of its rows
# distinct (below an id's), most of them (this share) seen once, is near-unique text
# (UNIQUE_TEXT): left out, since a model learns
# its values by heart (each seen in a row or two) and gains nothing on new rows; data.columns
# may name it "hashed" to keep it (its most frequent values, the rest in hash buckets).
HASHED_MIN_DISTINCT = 5000
HASHED_DISTINCT_SHARE = 0.5
# What a column is to the model: a feature as it is; an id or a constant, left out; near-unique
# text, left out unless data.columns names it hashed (its most frequent values kept, the rest in
# hash buckets); a timestamp, parsed into its parts (trainer_module/features.py,
# TIMESTAMP_PARTS). They reach the Transform as TransformSpec's column lists
# (trainer_module/settings.py).
FEATURE, ID, CONSTANT, HASHED, TIMESTAMP = "feature", "id", "constant", "hashed", "timestamp"
ROLES = (FEATURE, ID, CONSTANT, HASHED, TIMESTAMP)  # what data.columns may name
# A float column of at most CODE_TOP_K values, seen this many times each on average, is also a
# code (a coded float). Measured on benchmarks/model_quality.py: loans' interest_rate (58 values,
# 172 rows each) 0.9950 -> 0.9995; Wage's logwage (508 values, 6 rows each) coded costs 0.0014.
CODED_ROWS_PER_VALUE = 50
# ... and whose neighbouring values are a median of at least this many steps of the finest
# decimal place they are written to apart. A measurement fills its grid (diamonds' carat, 273
# values in hundredths: a gap of 1), a level from a table does not (loans' interest rates: 47).
# Measured on benchmarks/model_quality.py: diamonds' six measurements as codes cost R² 0.003.
CODED_GAP = 2
UNIQUE_TEXT = "near-unique text"  # found, never named



@dataclasses.dataclass(frozen=True)
class Role:
    role: str
    why: str
    order: str = ""  # a timestamp's: features.ORDERS
    # A large categorical column's: the values it keeps (seen at least data.min_count times,
    # up to data.max_vocabulary), and its rarer ones, which share the hash buckets.
    kept: int = 0
    rare: int = 0
    # A coded float's distinct values (each embedded as a code besides the number).
    codes: int = 0


def parse_override(name: str, value: str) -> tuple[str, str]:
    """(role, order) of a data.columns value ("feature", "timestamp", "timestamp:dmy", ...);
    raises ValueError naming the column."""
    role, _, order = str(value).partition(":")
    if role not in ROLES or (order and (role != TIMESTAMP or order not in ORDERS)):
        raise ValueError(f"data.columns.{name}: the role must be {', '.join(ROLES[:-1])} or "
                         f"{ROLES[-1]} (a timestamp may name its order: "
                         f"{', '.join(f'timestamp:{o}' for o in ORDERS)}), got {value!r}")
    return role, order


class _Column:
    def __init__(self):
        self.present = 0
        self.first = None  # the one value seen so far, while the column may be constant
        self.constant = True
        self.dates = WrittenDates()  # whether every present cell so far was a date
        self.id_candidate = True
        self.within_batch_distinct = 0
        self.distinct: list[pa.Array] = []  # each batch's distinct values, while a candidate
        # Each value's count; None once a float column has more than CODE_TOP_K values.
        self.values: ValueCounts | None = ValueCounts()

    def add(self, values: pa.Array, floats: bool = False) -> None:
        """floats: the column has held a decimal number so far (it is then no categorical
        column, and its values are counted only while they are at most CODE_TOP_K: a coded
        float's)."""
        present = values.drop_null() if values.null_count else values
        if not len(present):
            return
        self.present += len(present)
        unique = pc.unique(present)
        if floats and self.values is not None and (
                len(unique) > CODE_TOP_K or self.values.more_than(CODE_TOP_K)):
            self.values = None
        if self.values is not None:
            self.values.add(present)
        if self.constant:
            if len(unique) > 1 or (self.first is not None and unique[0].as_py() != self.first):
                self.constant = False
            self.first = unique[0].as_py()
        self.dates.add(present)
        if self.id_candidate:
            self.within_batch_distinct += len(unique)
            # Distinct over all batches is at most the sum of each batch's distinct counts.
            if self.within_batch_distinct < ID_DISTINCT_SHARE * self.present:
                self.id_candidate, self.distinct = False, []
            else:
                self.distinct.append(unique)

    def role(self, kind: str, min_count: int = MIN_COUNT,
             max_vocabulary: int = MAX_VOCABULARY) -> Role:
        if not self.present:
            return Role(CONSTANT, "no values, only missing cells")
        if self.constant:
            return Role(CONSTANT, f"one value ({self.first!r}) in every present cell")
        dates = self.dates.found() if kind == STRING else None
        if dates:
            return Role(TIMESTAMP, dates[1], dates[0])
        feature = (lambda: self._hashed(kind)  # noqa: E731 - evaluated only where no role was written
                   or self._large(kind, min_count, max_vocabulary) or self._coded(kind)
                   or Role(FEATURE, ""))
        if kind == FLOAT or not self.id_candidate or self.present < ID_MIN_VALUES:
            return feature()
        values = pa.chunked_array(self.distinct, pa.string())
        distinct = pc.count_distinct(values).as_py()
        share = distinct / self.present
        if share < ID_DISTINCT_SHARE:
            return feature()
        if kind == INT:
            low, high = (v.as_py() for v in pc.min_max(pc.cast(values, pa.int64())).values())
            if high - low + 1 > ID_RANGE_SLACK * distinct:
                return feature()  # unique, but not a sequence: a measurement
            return Role(ID, f"{distinct} distinct integers over {self.present} rows, "
                            f"a sequence from {low} to {high}")
        return Role(ID, f"{distinct} distinct values over {self.present} rows")


    def _hashed(self, kind: str) -> Role | None:
        """A text column of at least HASHED_MIN_DISTINCT values, at least HASHED_DISTINCT_SHARE
        of its rows distinct and that share of its values seen once (counted exactly): too many
        for a vocabulary, too few repeats to learn each, so left out (UNIQUE_TEXT)."""
        if kind != STRING or self.values is None:
            return None
        counts = self.values.counts()
        distinct = len(counts)
        if distinct < max(HASHED_MIN_DISTINCT, HASHED_DISTINCT_SHARE * self.present):
            return None
        once = pc.sum(pc.equal(counts, 1)).as_py() or 0
        if once < HASHED_DISTINCT_SHARE * distinct:
            return None  # its values repeat: a model can learn them
        return Role(UNIQUE_TEXT, f"{distinct:,} distinct values over {self.present:,} rows, "
                                 f"{once / distinct:.0%} of them in one row: a model would learn "
                                 "them by heart; data.columns = {column = \"hashed\"} keeps it, "
                                 f"its {HASHED_TOP_K} most frequent values and the rest hashed "
                                 f"into {HASH_BUCKETS} buckets")

    def _coded(self, kind: str) -> Role | None:
        """A float column of at most CODE_TOP_K values, CODED_ROWS_PER_VALUE rows each or more
        on average, CODED_GAP steps apart (`grid_gap`): its values are also embedded as
        codes."""
        if kind != FLOAT or self.values is None:
            return None
        distinct = len(self.values.counts())
        if distinct > CODE_TOP_K or self.present < CODED_ROWS_PER_VALUE * distinct:
            return None
        gap, step = grid_gap(self.values.values().to_pylist())
        if gap < CODED_GAP:
            return None
        return Role(FEATURE, f"{distinct:,} values, {self.present / distinct:,.0f} rows each on "
                             f"average, a median {float(gap * float(step)):g} apart ({gap:,g} "
                             f"steps of {float(step):g})", codes=distinct)

    def _large(self, kind: str, min_count: int, max_vocabulary: int) -> Role | None:
        """A text or integer column of more than VOCABULARY_TOP_K distinct values whose values
        repeat: every value seen min_count times kept, up to max_vocabulary, the rarer ones in
        HASH_BUCKETS hash buckets."""
        if kind not in (STRING, INT) or self.values is None:
            return None
        counts = self.values.counts()
        if len(counts) <= VOCABULARY_TOP_K:
            return None
        kept = min(pc.sum(pc.greater_equal(counts, min_count)).as_py() or 0, max_vocabulary)
        rare = len(counts) - kept
        times = {1: "once", 2: "twice"}.get(min_count, f"{min_count} times")
        capped = f", the {max_vocabulary:,} most frequent" if kept == max_vocabulary else ""
        # Counted over the whole table: Transform keeps the values its train split repeats (a
        # 20 M-row table's 10 M ids, each in 2 rows: 6.4 M), which the summary's table line says.
        return Role(FEATURE, f"{kept:,} values seen at least {times}{capped} over the whole "
                             f"table, {rare:,} rarer ones (Transform keeps those the train split "
                             f"repeats; the rest share {HASH_BUCKETS:,} hash buckets)",
                    kept=kept, rare=rare)


def grid_gap(texts: list[str]) -> tuple[float, decimal.Decimal]:
    """(the median gap between neighbouring distinct values of a float column, as written, in
    steps of the finest decimal place any of them needs; that step): "2.0" needs none, "15.52"
    two, "3.0999999046325684" sixteen, and a step is at most a unit (10, 20 and 30 are ten steps
    apart). inf for fewer than two numbers."""
    numbers = set()
    for text in texts:
        try:
            number = decimal.Decimal(text)
        except decimal.InvalidOperation:
            continue
        if number.is_finite():
            numbers.add(number.normalize())
    finest = min([0, *(number.as_tuple().exponent for number in numbers)])
    step = decimal.Decimal(1).scaleb(finest)
    if len(numbers) < 2:
        return math.inf, step
    steps = sorted(int(number.scaleb(-finest)) for number in numbers)
    gaps = sorted(b - a for a, b in zip(steps, steps[1:]))
    middle = len(gaps) // 2
    return float(gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2), step


class Profile:
    """Fed the check's cleaned batches (string columns, missing cells null), column by column."""

    def __init__(self, header: list[str]):
        self.header = header
        self.columns = [_Column() for _ in header]
        self.rows = 0

    def add(self, cleaned: pa.RecordBatch, floats: list[bool] | None = None) -> None:
        """floats: per column, whether it has held a decimal number so far (the check's
        csv_format profiles): such a column's values are not counted."""
        self.rows += cleaned.num_rows
        for i, (column, values) in enumerate(zip(self.columns, cleaned.columns)):
            column.add(values, bool(floats and floats[i]))

    def roles(self, types: dict[str, str], label: str, overrides: dict[str, str],
              where: str, min_count: int = MIN_COUNT,
              max_vocabulary: int = MAX_VOCABULARY) -> dict[str, Role]:
        """{column: Role} for every column but the label; `overrides` ({column: role}, from
        data.columns) win. Raises ValueError naming a column that is not there or a role that is
        not one, and a timestamp override on a column that is not text."""
        chosen = {}
        for name, value in overrides.items():
            if name not in types:
                raise ValueError(f"data.columns: '{name}' is not a column of {where} "
                                 f"(columns: {', '.join(self.header)})")
            role, order = parse_override(name, value)
            if name == label:
                raise ValueError(f"data.columns.{name}: '{name}' is the label, not a feature")
            if role == TIMESTAMP and order == EPOCH and types[name] == STRING:
                raise ValueError(f"data.columns.{name}: seconds since 1970 are numbers, and "
                                 f"'{name}' holds text")
            if role == TIMESTAMP and order != EPOCH and types[name] != STRING:
                raise ValueError(f"data.columns.{name}: a timestamp column holds dates as text "
                                 f"(or name timestamp:epoch for seconds), and '{name}' is "
                                 f"{types[name]}")
            if role == TIMESTAMP and not order:  # the order its cells show, else ISO's
                found = self.columns[self.header.index(name)].role(types[name])
                order = found.order if found.role == TIMESTAMP else YMD
            chosen[name] = Role(role, "set by data.columns"
                                + (f", read {ORDER_WORDS[order]}" if order else ""), order)
        roles = {}
        for name, column in zip(self.header, self.columns):
            if name == label:
                continue
            roles[name] = chosen.get(name) or column.role(types[name], min_count, max_vocabulary)
        return roles

    def table_rows(self, types: dict[str, str], roles: dict[str, Role],
                   max_vocabulary: int = MAX_VOCABULARY) -> dict[str, int]:
        """{feature: rows} of the built-in model's embedding tables, as the built-in
        preprocessing will size them (trainer_module/preprocessing.py): a text column's values
        (a missing cell one more), at most VOCABULARY_TOP_K, and its OOV bucket; an integer
        column's code likewise, a coded float's at most CODE_TOP_K; a hashed column's
        HASHED_TOP_K and its hash buckets; a large one's kept values and its hash buckets; every
        one at most max_vocabulary."""
        rows = {}
        for name, column in zip(self.header, self.columns):
            role = roles.get(name)
            kind = types.get(name)
            if role is None or role.role not in (FEATURE, HASHED) or (
                    kind not in (STRING, INT) and not role.codes):
                continue
            feature = transformed_name(name) if kind == STRING else code_name(name)
            if role.kept or role.rare:
                rows[feature] = role.kept + HASH_BUCKETS
                continue
            distinct = len(column.values.counts()) if column.values is not None else 0
            distinct += int(column.present < self.rows)  # missing: a value of its own
            if role.role == HASHED:
                rows[feature] = min(distinct, HASHED_TOP_K) + HASH_BUCKETS
            else:
                cap = VOCABULARY_TOP_K if kind in (STRING, INT) else CODE_TOP_K
                rows[feature] = min(distinct, cap, max_vocabulary) + OOV_BUCKETS
        return rows


def excluded(roles: dict[str, Role]) -> list[str]:
    return sorted(name for name, r in roles.items() if r.role in (ID, CONSTANT, UNIQUE_TEXT))


def large(roles: dict[str, Role]) -> list[str]:
    """The large categorical columns (each value seen often enough kept, the rest hashed)."""
    return sorted(name for name, r in roles.items() if r.role == FEATURE and r.kept)


def coded(roles: dict[str, Role]) -> list[str]:
    """The coded floats (each value also embedded as a code)."""
    return sorted(name for name, r in roles.items() if r.role == FEATURE and r.codes)


def timestamps(roles: dict[str, Role]) -> list[str]:
    return sorted(name for name, r in roles.items() if r.role == TIMESTAMP)


def hashed(roles: dict[str, Role]) -> list[str]:
    return sorted(name for name, r in roles.items() if r.role == HASHED)


def timestamp_orders(roles: dict[str, Role]) -> dict[str, str]:
    """{column: order} of the timestamp columns not read as ISO 8601 (features.ORDERS)."""
    return {name: r.order for name, r in sorted(roles.items())
            if r.role == TIMESTAMP and r.order and r.order != YMD}
