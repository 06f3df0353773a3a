"""Which embedding tables are split over the replicas, and what each costs, without TensorFlow
(`lockstep plan`, the run's summary and trainer_module/sharded_embedding.py read it).

A table of `rows` x `dim` float32 trains with Adam's two slots of its size: (1 + 2) x rows x dim
x 4 bytes. Mirrored, every replica holds all of it; split by rows (model parallelism), a replica
holds its block of about rows / N rows and their slots.
"""

from __future__ import annotations

import dataclasses

SLOTS = 2  # Adam's m and v
BYTES = 4  # float32


def table_bytes(rows: int, dim: int) -> int:
    """A table's bytes with its optimizer's slots."""
    return rows * dim * BYTES * (1 + SLOTS)


def kept_in_blocks(rows: int, dim: int, over: int) -> bool:
    """Whether a table of `rows` x `dim` is split by rows: its bytes with slots exceed `over`
    (trainer.shard_embeddings_over; 0: always, -1: never). Whatever the replica count: on one
    device it is one block, so a job's checkpoints hold the same objects on any topology."""
    return over >= 0 and table_bytes(rows, dim) > over


def shards_for(rows: int, dim: int, replicas: int, over: int) -> int:
    """How many blocks a table of `rows` x `dim` is split into: the replicas (at most its rows,
    a row or more a block), when `kept_in_blocks`; else 1, a whole table on every replica."""
    if replicas <= 1 or not kept_in_blocks(rows, dim, over):
        return 1
    return min(replicas, rows)


def block_sizes(rows: int, shards: int) -> list[int]:
    """The rows of each block: the first rows % shards blocks one more (TensorFlow's "div" split
    of ids over blocks, as its fixed-shards partitioner makes them)."""
    return [rows // shards + (1 if i < rows % shards else 0) for i in range(shards)]


@dataclasses.dataclass(frozen=True)
class Table:
    """One embedding table of a run: its feature, rows and width, and the blocks it is split in
    (1: mirrored)."""

    feature: str
    rows: int
    dim: int
    blocks: int = 1
    holders: str = "replicas"  # or "parameter servers": what holds the blocks

    @property
    def bytes(self) -> int:
        return table_bytes(self.rows, self.dim)

    @property
    def replica_bytes(self) -> int:
        """The most any replica holds of it."""
        return table_bytes(block_sizes(self.rows, self.blocks)[0], self.dim)

    def words(self) -> str:
        """"user_xf: 1,000,000 rows x 16, 192.0 MB with Adam's slots, split over 8 replicas:
        24.0 MB each" (or "on every replica")."""
        where = (f"split over {self.blocks} {self.holders}: {megabytes(self.replica_bytes)} each"
                 if self.blocks > 1 else "whole on every replica")
        return (f"{self.feature}: {self.rows:,} rows x {self.dim}, {megabytes(self.bytes)} with "
                f"Adam's slots, {where}")


def megabytes(count: int) -> str:
    return f"{count / 1e6:,.1f} MB"
