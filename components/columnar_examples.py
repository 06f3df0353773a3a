"""The ExampleGen's columnar copy of each TFRecord file: the same rows, already decoded.

The ExampleGen has each batch of rows as Arrow columns before it encodes them to tf.Examples
(csv_format.typed_batch: a one-value list per present cell, a null list per missing one). It
writes those columns too, as an Arrow IPC file beside each TFRecord file, in the same row order:

    <examples>/Split-train/data_tfrecord-00003-of-00008.gz          (what TFX reads)
    <examples>/Split-train.arrow/data_tfrecord-00003-of-00008.arrow (its copy, outside the split
                                                                     dir, so `Split-train/*` and
                                                                     TFX's readers never see it)

StatisticsGen and Transform read decoded RecordBatches (components/batched_records.py); where a
file has a copy, its batches come from the copy, as tfx_bsl's decoder would give them for that
reader's schema, and the records are not decoded again (tfx_bsl's DecodeBatch was 1.9 s of
Transform's 8.9 s over 240k x 20, and as much again in StatisticsGen, side by side with it on a
2-core machine). A reader that wants the raw records (the Evaluator), a schema the copy cannot
serve exactly (a type it was not written with, a feature it lacks), or a file without a copy
reads and decodes the records as before.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from tfx.dsl.io import fileio

SUFFIX = ".arrow"
# LZ4 frames: a third of the size (240k x 20: 31 MB instead of 96 MB), decompressed at GB/s.
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def copy_path(record_path: str) -> str:
    """Where the columnar copy of this TFRecord file is: <split dir>.arrow/<name>.arrow."""
    directory, name = posixpath.split(record_path)
    stem = name[:-len(".gz")] if name.endswith(".gz") else name
    return f"{directory.rstrip('/')}{SUFFIX}/{stem}{SUFFIX}"


def write(record_path: str, batch: pa.RecordBatch) -> str:
    """Writes the copy of the TFRecord file at record_path; returns the digest of its bytes,
    which are the same for the same rows in every run (the ExampleGen's row identities)."""
    path = copy_path(record_path)
    fileio.makedirs(posixpath.dirname(path))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_batch(batch)
    data = sink.getvalue()
    with fileio.open(path, "wb") as handle:  # local or an object store alike
        handle.write(data.to_pybytes())
    return hashlib.blake2b(memoryview(data), digest_size=16).hexdigest()


def rename(record_from: str, record_to: str) -> None:
    """Renames the copy along with its TFRecord file (where it has one)."""
    if fileio.exists(copy_path(record_from)):
        fileio.rename(copy_path(record_from), copy_path(record_to), overwrite=True)


_TYPES = {1: pa.large_binary(), 2: pa.int64(), 3: pa.float32()}  # schema_pb2's BYTES, INT, FLOAT


def _wanted(schema) -> list[tuple[str, pa.DataType]] | None:
    """(name, Arrow type) of each feature the decoder would give for this schema, in its order;
    None where the copy cannot stand in for the decoder (structured or typeless features)."""
    wanted = []
    for feature in schema.feature:
        value_type = _TYPES.get(feature.type)
        if value_type is None or feature.HasField("struct_domain"):
            return None
        wanted.append((feature.name, pa.large_list(value_type)))
    return wanted


def _open(path: str) -> pa.ipc.RecordBatchFileReader:
    if "://" in path:  # an object store: the whole file, read once
        with fileio.open(path, "rb") as handle:
            return pa.ipc.open_file(pa.BufferReader(handle.read()))
    return pa.ipc.open_file(pa.memory_map(path))


def read(record_path: str, batch_size: int, schema=None) -> Iterator[pa.RecordBatch] | None:
    """The file's rows as tfx_bsl's ExamplesToRecordBatchDecoder gives them for `schema` (None:
    no schema), batch_size at a time, from its copy; None where there is no copy or it cannot
    give exactly that (the caller then decodes the records)."""
    path = copy_path(record_path)
    if not fileio.exists(path):
        return None
    reader = _open(path)
    columns = reader.schema
    if schema is None:  # the decoder's order without a schema: by name
        return _batches(reader, batch_size, sorted(columns.names), inferred=True)
    wanted = _wanted(schema)
    if wanted is None or any(columns.get_field_index(name) < 0
                             or columns.field(name).type != kind for name, kind in wanted):
        return None
    return _batches(reader, batch_size, [name for name, _ in wanted], inferred=False)


def table(record_path: str) -> pa.Table | None:
    """The file's rows, every column as written (a one-value list per present cell, a null list
    per missing one), from its copy; None where it has no copy."""
    path = copy_path(record_path)
    if not fileio.exists(path):
        return None
    return _open(path).read_all()


def cells(column) -> pa.ChunkedArray:
    """A column of one-value lists (a copy's cells) as its values, null where missing; a flat
    column as it is."""
    column = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
    if pa.types.is_large_list(column.type) or pa.types.is_list(column.type):
        return pc.list_element(column, 0)
    return column


def _batches(reader: pa.ipc.RecordBatchFileReader, batch_size: int, names: list[str],
             inferred: bool) -> Iterator[pa.RecordBatch]:
    for index in range(reader.num_record_batches):
        whole = reader.get_batch(index)
        whole = pa.RecordBatch.from_arrays([whole.column(n) for n in names], names)
        for start in range(0, whole.num_rows, batch_size):
            part = whole.slice(start, batch_size)
            yield _as_inferred(part) if inferred else part


def _as_inferred(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Without a schema the decoder infers each column's type from the values it sees: a
    column with no value in the batch has Arrow's null type."""
    if not any(column.null_count == len(column) for column in batch.columns):
        return batch
    return pa.RecordBatch.from_arrays(
        [pa.nulls(len(c)) if c.null_count == len(c) else c for c in batch.columns],
        batch.schema.names)
