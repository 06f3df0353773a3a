"""Each value's count in one column of a table read in batches, exact: each batch's value counts
(pyarrow's, no Python per row), merged into the column's whenever they outgrow them, so a
distinct count is never a sum over batches (pipeline/column_roles.py's profile)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# Value counts pending in a column's list are merged into its counts once they hold this many
# entries, or as many as the counts do (so each entry is merged a few times at most).
MERGE_AT = 1 << 16


class ValueCounts:
    """Each value's count in one column over every batch, exact."""

    def __init__(self):
        self.merged: pa.Table | None = None
        self.pending: list[pa.Table] = []
        self.pending_entries = 0

    def add(self, present: pa.Array) -> None:
        counts = pc.value_counts(present)
        self.pending.append(pa.table({"values": counts.field("values"),
                                      "counts": counts.field("counts")}))
        self.pending_entries += len(counts)
        if self.pending_entries >= max(MERGE_AT, self.merged.num_rows if self.merged else 0):
            self._merge()

    def _merge(self) -> None:
        parts = ([self.merged] if self.merged is not None else []) + self.pending
        if len(parts) > 1:
            summed = pa.concat_tables(parts).group_by("values").aggregate([("counts", "sum")])
            self.merged = pa.table({"values": summed["values"], "counts": summed["counts_sum"]})
        elif parts:
            self.merged = parts[0]
        self.pending, self.pending_entries = [], 0

    def more_than(self, limit: int) -> bool:
        """Whether more than `limit` distinct values are counted (merging only when the pending
        counts could take them past it)."""
        if (self.merged.num_rows if self.merged is not None else 0) + self.pending_entries <= limit:
            return False
        self._merge()
        return self.merged.num_rows > limit

    def values(self) -> pa.Array:
        """Each distinct value, in the order of `counts`."""
        self._merge()
        if self.merged is None:
            return pa.array([], pa.string())
        return self.merged["values"].combine_chunks()

    def counts(self) -> pa.Array:
        """Each distinct value's count."""
        self._merge()
        if self.merged is None:
            return pa.array([], pa.int64())
        return self.merged["counts"].combine_chunks()
