"""Which split (train or eval) a CSV row goes to: never decided by its label.

TFX's rule hashes each row's content, label included. On a table with repeated rows that sends
every copy of (x, 'yes') to one side and every copy of (x, 'no') to one side, each independently:
the model learns P(yes | x) = 1 where the eval split holds only 'no', and the gate measures that
damage wrongly. lockstep's rules:

- **by position** (the default): a seeded hash of where the row is, its file's name relative to the
  data root (so a span's files keep their splits when the root moves) and its place in the file
  (the byte range it is read in, `csv_format.plan_reads`, and its row number there). Rows, repeated
  or not, spread across the splits at the bucket ratio, as a random split does; a re-run, or the same
  file ingested again, puts every row where it was.
- **by group** (`data.split_by = ["user_id", ...]`): a seeded hash of those columns' cells, so
  every row of a group lands on one side (TFX's `partition_feature_name`, for several columns). The
  label can never be a key (`check_keys`).

Both are vectorized (numpy's uint64 arithmetic, pandas' C hash of the group keys): no Python per
row. `SplitRule` is the one description: the ExampleGen applies it, the check before the run applies
the same rule to the same rows to measure the skew between the splits (pipeline/split_check.py).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

POSITION, GROUP = "position", "group"
# Part of what the rule records (to_dict): a change of the hashing itself changes the span
# identities that key Transform's analyzer cache (csv_records.span_identities).
VERSION = 1
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


class SplitKeyError(ValueError):
    """A split key that cannot be used (the label, or a column the data lacks): one line."""


@dataclasses.dataclass(frozen=True)
class SplitRule:
    """How rows are assigned to splits. buckets: each split's hash buckets (train 4, eval 1:
    4 in 5 rows train), in the splits' order; by: group columns (empty: by position)."""

    buckets: tuple[int, ...] = (4, 1)
    by: tuple[str, ...] = ()
    seed: int = 0

    @property
    def kind(self) -> str:
        return GROUP if self.by else POSITION

    def words(self, names: tuple[str, ...] = ("train", "eval")) -> str:
        """"by row position, seed 0, train 4 : eval 1 buckets" (what the summary says)."""
        how = (f"by groups of {', '.join(self.by)}" if self.by else "by row position")
        ratio = " : ".join(f"{n} {b}" for n, b in zip(names, self.buckets))
        return f"{how} (never by the label), seed {self.seed}, {ratio} buckets"

    def assign(self, cleaned: pa.RecordBatch, file_key: str, read_start: int,
               first_row: int) -> np.ndarray:
        """The split index of each row of a `csv_format.clean` batch: file_key, the file's name
        relative to the data root; read_start, where its read began; first_row, the batch's
        first row's number within that read."""
        total = sum(self.buckets)
        if self.by:
            hashes = _group_hashes(cleaned, self.by)
        else:
            rows = np.arange(first_row, first_row + cleaned.num_rows, dtype=np.uint64)
            place = _mix(np.uint64(_text_hash(file_key)) ^ _mix(np.uint64(read_start)))
            hashes = _mix(rows ^ place)
        buckets = _mix(hashes ^ _mix(np.uint64(self.seed) + np.uint64(0x51A17))) % np.uint64(total)
        return np.searchsorted(np.cumsum(self.buckets), buckets, side="right")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "by": list(self.by), "seed": self.seed,
                "buckets": list(self.buckets), "version": VERSION}

    @classmethod
    def from_dict(cls, values: dict) -> "SplitRule":
        return cls(tuple(values["buckets"]), tuple(values["by"]), int(values["seed"]))


def check_keys(by, label: str, header: list[str] | None = None, where: str = "") -> None:
    """Raises SplitKeyError when the label is a split key or (header given) a key is no column."""
    if label in by:
        raise SplitKeyError(f"data.split_by: the label '{label}' can never decide the split "
                            "(a row's split must not depend on its answer)")
    for name in by:
        if header is not None and name not in header:
            raise SplitKeyError(f"{where}: data.split_by column '{name}' is not in the header "
                                f"({', '.join(header)})")


def _mix(x):
    """SplitMix64's finalizer on uint64 (numpy wraps on overflow, as the algorithm wants)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (x ^ (x >> np.uint64(31))) & _MASK


def _text_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _group_hashes(cleaned: pa.RecordBatch, by: tuple[str, ...]) -> np.ndarray:
    """A 64-bit hash of each row's group key: its cells in `by`, stripped, a missing cell as
    itself (pandas' SipHash with a fixed key, in C: the same on every machine and run)."""
    from pandas.util import hash_array

    names = cleaned.schema.names
    columns = [cleaned.column(names.index(name)) for name in by]
    key = columns[0] if len(columns) == 1 else pc.binary_join_element_wise(
        *columns, "\x1f", null_handling="replace", null_replacement="\x00")
    key = pc.fill_null(key, "\x00")
    return hash_array(key.to_numpy(zero_copy_only=False), categorize=True).astype(np.uint64)
