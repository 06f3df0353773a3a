"""What each column is to the model, decided once before the run beside the task: a feature, an
id, a constant or a timestamp. Ids and constants are left out of the model, timestamps are parsed
into parts (trainer_module/preprocessing.py), and `data.columns` overrides any of it.

- **constant**: one distinct value in every present cell: nothing to learn from.
- **id**: a text or integer column whose present values are (nearly) all distinct: a row number,
  a sequential key, a hash, a name per row. An integer column must also be a near-dense range
  (row numbers, sequential keys): an integer measurement that happens to be unique per row stays
  a feature, and so does any float column (a coordinate, an amount).
- **timestamp**: a text column whose every present cell is an ISO 8601 date or date-time
  (`features.TIMESTAMP_PATTERN`).

The profile reads the same cleaned Arrow batches as the data check (no Python per row); to
count distinct values it keeps each batch's distinct values only for columns that can still be
ids, so memory stays bounded by those columns.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from components.csv_format import FLOAT, INT, STRING
from trainer_module.config import CONSTANT, FEATURE, ID, ROLES, TIMESTAMP
from trainer_module.features import TIMESTAMP_PATTERN

ID_DISTINCT_SHARE = 0.99  # distinct / present values at or above this: every row its own value
ID_RANGE_SLACK = 1.5  # an integer id spans at most this times its distinct count (a sequence)
ID_MIN_VALUES = 20  # fewer present values say nothing about uniqueness


@dataclasses.dataclass(frozen=True)
class Role:
    role: str
    why: str


class _Column:
    def __init__(self):
        self.present = 0
        self.first = None  # the one value seen so far, while the column may be constant
        self.constant = True
        self.timestamps = True  # every present cell so far matched the pattern
        self.id_candidate = True
        self.within_batch_distinct = 0
        self.distinct: list[pa.Array] = []  # each batch's distinct values, while a candidate

    def add(self, values: pa.Array) -> None:
        present = values.drop_null() if values.null_count else values
        if not len(present):
            return
        self.present += len(present)
        unique = pc.unique(present)
        if self.constant:
            if len(unique) > 1 or (self.first is not None and unique[0].as_py() != self.first):
                self.constant = False
            self.first = unique[0].as_py()
        if self.timestamps:
            self.timestamps = bool(pc.all(pc.match_substring_regex(present, TIMESTAMP_PATTERN)).as_py())
        if self.id_candidate:
            self.within_batch_distinct += len(unique)
            # Distinct over all batches is at most the sum of each batch's distinct counts.
            if self.within_batch_distinct < ID_DISTINCT_SHARE * self.present:
                self.id_candidate, self.distinct = False, []
            else:
                self.distinct.append(unique)

    def role(self, kind: str) -> Role:
        if self.constant:
            return Role(CONSTANT, f"one value ({self.first!r}) in every present cell")
        if kind == STRING and self.timestamps:
            return Role(TIMESTAMP, "every cell an ISO 8601 date or time: parsed into "
                                   "year, month, day, day of week, hour")
        if kind == FLOAT or not self.id_candidate or self.present < ID_MIN_VALUES:
            return Role(FEATURE, "")
        values = pa.chunked_array(self.distinct, pa.string())
        distinct = pc.count_distinct(values).as_py()
        share = distinct / self.present
        if share < ID_DISTINCT_SHARE:
            return Role(FEATURE, "")
        if kind == INT:
            low, high = (v.as_py() for v in pc.min_max(pc.cast(values, pa.int64())).values())
            if high - low + 1 > ID_RANGE_SLACK * distinct:
                return Role(FEATURE, "")  # unique, but not a sequence: a measurement
            return Role(ID, f"{distinct} distinct integers over {self.present} rows, "
                            f"a sequence from {low} to {high}")
        return Role(ID, f"{distinct} distinct values over {self.present} rows")


class Profile:
    """Fed the check's cleaned batches (string columns, missing cells null), column by column."""

    def __init__(self, header: list[str]):
        self.header = header
        self.columns = [_Column() for _ in header]

    def add(self, cleaned: pa.RecordBatch) -> None:
        for column, values in zip(self.columns, cleaned.columns):
            column.add(values)

    def roles(self, types: dict[str, str], label: str, overrides: dict[str, str],
              where: str) -> dict[str, Role]:
        """{column: Role} for every column but the label; `overrides` ({column: role}, from
        data.columns) win. Raises ValueError naming a column that is not there or a role that is
        not one, and a timestamp override on a column that is not text."""
        for name, role in overrides.items():
            if name not in types:
                raise ValueError(f"data.columns: '{name}' is not a column of {where} "
                                 f"(columns: {', '.join(self.header)})")
            if role not in ROLES:
                raise ValueError(f"data.columns.{name}: the role must be "
                                 f"{', '.join(ROLES[:-1])} or {ROLES[-1]}, got {role!r}")
            if name == label:
                raise ValueError(f"data.columns.{name}: '{name}' is the label, not a feature")
            if role == TIMESTAMP and types[name] != STRING:
                raise ValueError(f"data.columns.{name}: a timestamp column holds ISO 8601 text, "
                                 f"and '{name}' is {types[name]}")
        roles = {}
        for name, column in zip(self.header, self.columns):
            if name == label:
                continue
            roles[name] = (Role(overrides[name], "set by data.columns") if name in overrides
                           else column.role(types[name]))
        return roles


def excluded(roles: dict[str, Role]) -> list[str]:
    return sorted(name for name, r in roles.items() if r.role in (ID, CONSTANT))


def timestamps(roles: dict[str, Role]) -> list[str]:
    return sorted(name for name, r in roles.items() if r.role == TIMESTAMP)
