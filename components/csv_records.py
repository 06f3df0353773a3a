"""CsvExampleGen's Beam side (components/csv_example_gen.py): the CSV files of one input split
as typed tf.Examples, in byte ranges, never rows:

    files -> byte ranges -> Reshuffle -> profile (Arrow) -> merge -> one type per column
                         `-> read again, encode (tfx_bsl, C++), split by hash, write shards

`CsvRecords` is the transform; each worker writes its record batches to temporary files (and
their columnar copies, components/columnar_examples.py) and `finalize` names them in the order of
their first rows, the same in every run of the same data. Also the records' types-only schema
and each span's identity."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import threading
import uuid
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow as tf
from tfx.dsl.io import fileio
from tfx.types import standard_component_specs
from tensorflow_metadata.proto.v0 import schema_pb2

from components import columnar_examples, csv_format, row_split, spans
from components.example_gen_spec import ExampleGenSpec
from trainer_module import input_pipeline

SHARD_NAME = "data_tfrecord"  # TFX's name for ExampleGen's files
COLUMN_TYPES_FILE = "column_types.json"  # beside the split dirs: the types every record was encoded with
TEMP_PREFIX = ".tmp-"
# zlib's fastest level: at its default (6) compressing took 45 % of ExampleGen's time; level 1
# is about 3x faster for files some 10-20 % larger, read back as fast.
GZIP_LEVEL = 1


def _plan(path: str, header: list[str], first: str) -> list[csv_format.Read]:
    file_header, data_offset = csv_format.read_header(path)
    if file_header != header:
        raise csv_format.CsvError(f"{path}: its header differs from {first}'s")
    return csv_format.plan_reads(path, data_offset)


def _threaded(fn, items, workers: int = os.cpu_count() or 1):
    """fn over items on a few threads (pyarrow, tfx_bsl and TFRecord writes free the GIL for
    much of their work), at most `workers + 1` in flight so memory stays bounded; results in
    completion order."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        pending = set()
        for item in items:
            pending.add(pool.submit(fn, item))
            if len(pending) > workers:
                done, pending = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED)
                yield from (f.result() for f in done)
        for future in concurrent.futures.as_completed(pending):
            yield future.result()


class _ProfileRead(beam.DoFn):
    """One read's column profiles (counts only), from its Arrow record batches."""

    def __init__(self, header: list[str], missing_values: list[str]):
        self._header, self._missing_values = header, missing_values

    def setup(self):
        self._missing = csv_format.missing_tokens(self._missing_values)

    def process(self, read: csv_format.Read):
        yield csv_format.merge_profiles(_threaded(
            lambda batch: csv_format.profile_batch(csv_format.clean(batch, self._missing)),
            csv_format.record_batches(read, self._header)))


class _MergeProfiles(beam.CombineFn):
    def create_accumulator(self):
        return None

    def add_input(self, acc, profiles):
        return csv_format.merge_profiles(p for p in (acc, profiles) if p is not None)

    def merge_accumulators(self, accs):
        return csv_format.merge_profiles(a for a in accs if a is not None)

    def extract_output(self, acc):
        return acc


class _Encode(beam.DoFn):
    """Reads one byte range, types and encodes its record batches to serialized tf.Examples in
    C++ (tfx_bsl), assigns each row to a split by the split rule (components/row_split.py: by its
    position or its group, never its label), and either yields the records (`shard_dirs` empty) or
    writes each batch's records of each split to a temporary GZIP TFRecord file in that split's
    directory and yields a `Written` for it; `finalize` names the files once all are written, in
    the order of their first rows' identities (never in the order Beam's workers finished)."""

    def __init__(self, header: list[str], missing_values: list[str], rule: row_split.SplitRule,
                 shard_dirs: list[str], input_base: str, span_of: dict[str, int] | None = None):
        self._header, self._missing_values = header, missing_values
        self._rule, self._shard_dirs = rule, shard_dirs
        self._input_base, self._span_of = input_base, span_of or {}

    def setup(self):
        self._missing = csv_format.missing_tokens(self._missing_values)
        self._local = threading.local()  # one encoder per thread

    @property
    def _encoder(self):
        if not hasattr(self._local, "encoder"):
            from tfx_bsl.coders import example_coder

            self._local.encoder = example_coder.RecordBatchToExamplesEncoder()
        return self._local.encoder

    def process(self, read: csv_format.Read, types: dict[str, str]):
        if not self._shard_dirs:
            for batch in csv_format.record_batches(read, self._header):
                cleaned = csv_format.clean(batch, self._missing)
                yield from self._encoder.encode(csv_format.typed_batch(cleaned, types))
            return
        span = self._span_of.get(read.path)
        file_key = csv_format.relative_name(read.path, self._input_base)
        for written in _threaded(
                lambda placed: self._encode_and_write(*placed, types, span, file_key, read.start),
                csv_format.numbered_batches(read, self._header)):
            yield from written

    def _encode_and_write(self, first_row: int, batch, types: dict[str, str], span: int | None,
                          file_key: str, read_start: int) -> list[Written]:
        cleaned = csv_format.clean(batch, self._missing)
        typed = csv_format.typed_batch(cleaned, types)
        records = self._encoder.encode(typed)
        first = (file_key, read_start, first_row)  # the identity of the batch's first row
        if len(self._rule.buckets) == 1:
            return [Written(0, span, first, *self._write(self._shard_dirs[0], records, typed))]
        split_of = self._rule.assign(cleaned, file_key, read_start, first_row)
        written = []
        for split in np.unique(split_of):
            rows = np.flatnonzero(split_of == split)
            part = [records[row] for row in rows]
            written.append(Written(int(split), span, first, *self._write(
                self._shard_dirs[split], part, typed.take(pa.array(rows)))))
        return written

    @staticmethod
    def _write(directory: str, records: list[bytes], columns: pa.RecordBatch
               ) -> tuple[str, int, str]:
        """The records to a GZIP TFRecord file, and their columns to its columnar copy
        (components/columnar_examples.py): (its temporary path, its records, the copy's digest)."""
        path = f"{directory}/{TEMP_PREFIX}{uuid.uuid4().hex}.gz"
        with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(
                compression_type="GZIP", compression_level=GZIP_LEVEL)) as out:
            for record in records:
                out.write(record)
        return path, len(records), columnar_examples.write(path, columns)


def shard_prefix(span: int | None) -> str:
    """The name every file of one span starts with in a split dir (data_tfrecord-span00003-), so a
    span's records can be read on their own (Transform's analyzer cache, per span)."""
    return f"{SHARD_NAME}-" if span is None else f"{SHARD_NAME}-span{span:05d}-"


class Written(NamedTuple):
    """One file a worker wrote: its split and span, the identity of its first row (the source
    file's name relative to the data root, where its read began, the row's number in that read:
    what the split rule hashes), its temporary path, its records, and its columnar copy's digest
    (the copy's bytes are the same in every run; the records' are not: a tf.Example's map of
    features is serialized in no fixed order)."""

    split: int
    span: int | None
    first: tuple[str, int, int]
    path: str
    rows: int
    digest: str


def finalize(written: list[Written], shard_dirs: list[str]) -> None:
    """Renames each split's written files to data_tfrecord[-spanSSSSS]-NNNNN-of-NNNNN.gz in the
    order of their first rows' identities, so a file's name and its rows are the same in every run
    of the same data, whatever order Beam's workers wrote them in; removes temporary files of
    attempts that did not finish (a retried bundle on a distributed runner); and writes beside the
    split its record count (the Trainer's plan reads it: trainer_module/input_pipeline.py,
    recorded_rows) and its files' row identities (input_pipeline.recorded_identities: the
    Trainer's input fingerprint)."""
    for split, directory in enumerate(shard_dirs):
        identities = []
        for span in sorted({w.span for w in written if w.split == split}, key=lambda sp: sp or 0):
            mine = sorted((w for w in written if w.split == split and w.span == span),
                          key=lambda w: w.first)
            for index, w in enumerate(mine):
                name = f"{shard_prefix(span)}{index:05d}-of-{len(mine):05d}.gz"
                fileio.rename(w.path, f"{directory}/{name}", overwrite=True)
                columnar_examples.rename(w.path, f"{directory}/{name}")
                identities.append([name, *w.first, w.rows, w.digest])
        for stale in (fileio.glob(f"{directory}/{TEMP_PREFIX}*")
                      + fileio.glob(columnar_examples.copy_path(f"{directory}/{TEMP_PREFIX}*"))):
            fileio.remove(stale)
        base = directory.rstrip("/")
        with fileio.open(f"{base}{input_pipeline.ROWS_SUFFIX}", "w") as out:
            out.write(str(sum(w.rows for w in written if w.split == split)))
        with fileio.open(f"{base}{input_pipeline.IDENTITIES_SUFFIX}", "w") as out:
            out.write(json.dumps({"version": input_pipeline.IDENTITIES_VERSION,
                                  "files": sorted(identities)}))


def _write_types(types: dict[str, str], directory: str) -> None:
    with fileio.open(f"{directory}/{COLUMN_TYPES_FILE}", "w") as out:
        out.write(json.dumps(types, sort_keys=True))


_SCHEMA_TYPES = {csv_format.INT: schema_pb2.INT, csv_format.FLOAT: schema_pb2.FLOAT,
                 csv_format.STRING: schema_pb2.BYTES}


def types_schema(types: dict[str, str]) -> schema_pb2.Schema:
    """The schema of the records as they were encoded: each column with its type and nothing
    else, so every feature parses as a tf.io.VarLenFeature (a missing cell is an absent value),
    the feature spec SchemaGen's schema gives with infer_feature_shape=False. Transform reads
    the records with it, so it need not wait for StatisticsGen and SchemaGen."""
    schema = schema_pb2.Schema()
    for name, kind in types.items():
        schema.feature.add(name=name, type=_SCHEMA_TYPES[kind])
    return schema


def span_identities(chosen: list[int], files: list[str], span_pattern_full: str,
                    encoding: dict[str, Any]) -> dict[int, str]:
    """{span: identity}: sha256 over the span number, its files (path, size, mtime) and
    `encoding` (column types, missing tokens, label, split config): what decides its records."""
    by_span = spans.group(files, span_pattern_full)
    identities = {}
    for span in chosen:
        digest = hashlib.sha256(json.dumps(
            {"span": span, "files": spans.fingerprint(by_span.get(span, [])),
             "encoding": encoding}, sort_keys=True).encode())
        identities[span] = f"span{span:05d}-{digest.hexdigest()[:32]}"
    return identities


@beam.ptransform_fn
def CsvRecords(pipeline: beam.Pipeline, exec_properties: dict[str, Any], split_pattern: str,
                buckets: tuple[int, ...] = (1,), shard_dirs: tuple[str, ...] = ()):
    """The CSV files of one input split as serialized tf.Examples, or (shard_dirs given) as
    written files, one PCollection of (split index, path)."""
    input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    spec = ExampleGenSpec.from_exec_properties(exec_properties)
    span_of = {}
    if spec.span_pattern:
        pattern = f"{input_base.rstrip('/')}/{spec.span_pattern}"
        _, files = spec.select_spans(input_base)
        span_of = {path: span for span, paths in spans.group(files, pattern).items()
                   for path in paths}
    else:
        pattern = f"{input_base.rstrip('/')}/{split_pattern}"
        files = sorted(fileio.glob(pattern))
    if not files:
        raise csv_format.CsvError(f"{pattern}: no CSV file matches")
    missing = list(spec.missing_values)
    header, _ = csv_format.read_header(files[0])
    label = spec.label
    if label and label not in header:
        raise csv_format.CsvError(
            f"{files[0]}: label column '{label}' is not in the header ({', '.join(header)})")
    try:
        row_split.check_keys(spec.split_by, label, header, files[0])
    except row_split.SplitKeyError as err:
        raise csv_format.CsvError(str(err)) from None
    where = files[0] if len(files) == 1 else pattern

    reads = (pipeline
             | "Files" >> beam.Create(files)
             | "Plan" >> beam.FlatMap(_plan, header=header, first=files[0])
             | "Spread" >> beam.Reshuffle())
    types = (reads
             | "Profile" >> beam.ParDo(_ProfileRead(header, missing))
             | "Merge" >> beam.CombineGlobally(_MergeProfiles())
             | "Types" >> beam.Map(lambda profiles: csv_format.column_types(
                 header, profiles, where, files, missing)))
    if shard_dirs:  # read back by Executor.Do: the schema, the spans' identities
        _ = types | "KeepTypes" >> beam.Map(_write_types,
                                            directory=shard_dirs[0].rsplit("/", 1)[0])
    return reads | "Encode" >> beam.ParDo(
        _Encode(header, missing, spec.split_rule(buckets), list(shard_dirs), input_base, span_of),
        types=beam.pvalue.AsSingleton(types))
