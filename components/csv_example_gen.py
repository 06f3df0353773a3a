"""CsvExampleGen on Arrow: CSV files to tf.Examples in GZIP TFRecords, with Beam, at C++ speed.

TFX's stock CsvExampleGen types a column from its cells as they are, so the penguins source's `NA`
turns a numeric column into a string one, and it handles each row and cell in Python. This one
treats the configured missing tokens (`NA`, empty, `NaN`, ...) as absent features, types each
column over the whole input, and fails with the file, column and line of a cell that does not fit
(components/csv_format.py). Its Beam pipeline moves byte ranges of files, never rows:

    files -> byte ranges -> Reshuffle -> profile (Arrow) -> merge -> one type per column
                         `-> read again, encode (tfx_bsl, C++), split by hash, write shards

Reading twice keeps memory bounded (no record is held between the passes). Each worker writes its
record batches to temporary files in the split directories, each with its columnar copy (the same
rows as Arrow columns, which StatisticsGen and Transform read instead of decoding the records:
components/columnar_examples.py); one final step names them. It is a
FileBasedExampleGen, so input/output configs work as in TFX; its hash buckets are filled by
components/row_split.py (by each row's position, or by group columns, never by the label: TFX
hashes each row's content, which splits a table of repeated rows by its label); spans are
resolved by this executor (components/spans.py), so they work on every
orchestrator.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
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
from google.protobuf import any_pb2, json_format, struct_pb2
from tfx.components.example_gen import component as example_gen_component
from tfx.components.example_gen import driver as example_gen_driver
from tfx.components.example_gen import utils as example_gen_utils
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, channel, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.utils import io_utils, proto_utils
from tfx.components.util import examples_utils
from tensorflow_metadata.proto.v0 import schema_pb2

from components import columnar_examples, csv_format, row_split, spans
from components.compat import beam as beam_compat
from trainer_module import input_pipeline

SPANS_KEY = "spans"
DATA_FINGERPRINT_KEY = "data_fingerprint"  # spans.fingerprint of the chosen spans' files
# {span: its identity}, JSON: a digest of everything that decides a span's records (its files, the
# column types, the missing tokens, the split), so equal identities mean equal records. Transform
# keys its analyzer cache on it (components/transform.py).
SPAN_DATASETS_KEY = "span_datasets"
# On the Examples: the split rule, JSON (row_split.SplitRule.to_dict): the summary and report say it.
SPLIT_KEY = "split_rule"
SHARD_NAME = "data_tfrecord"  # TFX's name for ExampleGen's files
SCHEMA_KEY = standard_component_specs.SCHEMA_KEY  # the types-only schema's output key
SCHEMA_FILE = "schema.pbtxt"  # its file, SchemaGen's name
COLUMN_TYPES_FILE = "column_types.json"  # beside the split dirs: the types every record was encoded with
TEMP_PREFIX = ".tmp-"
# zlib's fastest level: at its default (6) compressing took 45 % of ExampleGen's time; level 1
# is about 3x faster for files some 10-20 % larger, read back as fast.
GZIP_LEVEL = 1


class ExampleGenConfigError(ValueError):
    """ExampleGen's custom_config cannot be read: the message names the key."""


_SPEC_KEYS = ("label", "missing_values", "span_pattern", "span_window", "span_marker",
              "split_by", "split_seed")


@dataclasses.dataclass(frozen=True)
class ExampleGenSpec:
    """What the executor and the driver read from ExampleGen's custom_config: the label column,
    the cells that mean missing, the span settings (components/spans.py) and the split's group
    columns and seed (components/row_split.py). The codec refuses an unknown, missing or mistyped
    key, as TrainSpec and TransformSpec do."""

    label: str
    missing_values: tuple[str, ...] = csv_format.DEFAULT_MISSING_VALUES
    span_pattern: str = ""
    span_window: int = 1
    span_marker: str = spans.DEFAULT_MARKER
    split_by: tuple[str, ...] = ()
    split_seed: int = 0

    def split_rule(self, buckets: tuple[int, ...]) -> row_split.SplitRule:
        return row_split.SplitRule(tuple(buckets), self.split_by, self.split_seed)

    def to_custom_config(self) -> example_gen_pb2.CustomConfig:
        struct = struct_pb2.Struct()
        struct.update({"label": self.label, "missing_values": list(self.missing_values),
                       "span_pattern": self.span_pattern, "span_window": self.span_window,
                       "span_marker": self.span_marker, "split_by": list(self.split_by),
                       "split_seed": self.split_seed})
        packed = any_pb2.Any()
        packed.Pack(struct)
        return example_gen_pb2.CustomConfig(custom_config=packed)

    @classmethod
    def from_exec_properties(cls, exec_properties: dict[str, Any]) -> "ExampleGenSpec":
        raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
        if not raw:
            raise ExampleGenConfigError("ExampleGen custom_config: missing (it names the label)")
        config = example_gen_pb2.CustomConfig()
        json_format.Parse(raw, config)
        struct = struct_pb2.Struct()
        config.custom_config.Unpack(struct)
        return cls.from_dict(json_format.MessageToDict(struct))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ExampleGenSpec":
        unknown = sorted(set(values) - set(_SPEC_KEYS))
        missing = sorted(set(_SPEC_KEYS) - set(values))
        if unknown or missing:
            raise ExampleGenConfigError("ExampleGen custom_config: " + "; ".join(
                ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing key(s) {', '.join(missing)}"] if missing else [])))
        tokens = values["missing_values"]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: missing_values must be a list of text, got {tokens!r}")
        window = values["span_window"]
        if isinstance(window, bool) or not isinstance(window, (int, float)) \
                or window != int(window) or window < 1:
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: span_window must be a whole number >= 1, got {window!r}")
        for key in ("label", "span_pattern", "span_marker"):
            if not isinstance(values[key], str):
                raise ExampleGenConfigError(
                    f"ExampleGen custom_config: {key} must be text, got {values[key]!r}")
        by, seed = values["split_by"], values["split_seed"]
        if not isinstance(by, list) or not all(isinstance(c, str) for c in by):
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: split_by must be a list of column names, got {by!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, float)) or seed != int(seed):
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: split_seed must be a whole number, got {seed!r}")
        try:
            row_split.check_keys(by, values["label"])
        except row_split.SplitKeyError as err:
            raise ExampleGenConfigError(f"ExampleGen custom_config: {err}") from None
        return cls(values["label"], tuple(tokens), values["span_pattern"], int(window),
                   values["span_marker"], tuple(by), int(seed))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "missing_values": list(self.missing_values),
                "split_by": list(self.split_by)}

    def select_spans(self, input_base: str) -> tuple[list[int], list[str]]:
        """The spans, and their files, that the span settings select."""
        return spans.select(input_base, self.span_pattern, self.span_window,
                            marker=self.span_marker)


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
    directory and yields a `Written` for it; `_finalize` names the files once all are written, in
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


def _finalize(written: list[Written], shard_dirs: list[str]) -> None:
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
def _CsvRecords(pipeline: beam.Pipeline, exec_properties: dict[str, Any], split_pattern: str,
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


class Executor(BaseExampleGenExecutor):
    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return _CsvRecords

    @beam_compat.spare_fixed_costs  # two fixed costs of Beam's spared: compat/beam.py
    def Do(self, input_dict, output_dict, exec_properties):
        """TFX's ExampleGen, with the records never passing one by one through Beam: each
        worker writes its batches' records straight to files (see _Encode)."""
        self._log_startup(input_dict, output_dict, exec_properties)
        input_config, output_config = example_gen_pb2.Input(), example_gen_pb2.Output()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY],
                                  input_config)
        proto_utils.json_to_proto(exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY],
                                  output_config)
        split_names = example_gen_utils.generate_output_split_names(input_config, output_config)
        examples = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.EXAMPLES_KEY])
        examples.split_names = artifact_utils.encode_split_names(split_names)
        split_dirs = [artifact_utils.get_split_uri([examples], name) for name in split_names]
        for directory in split_dirs:
            fileio.makedirs(directory)
        spec = ExampleGenSpec.from_exec_properties(exec_properties)
        chosen, files = [], []
        if spec.span_pattern:
            chosen, files = spec.select_spans(
                exec_properties[standard_component_specs.INPUT_BASE_KEY])
        exec_properties["_beam_pipeline_args"] = self._beam_pipeline_args or []
        if output_config.split_config.splits:
            buckets = tuple(s.hash_buckets for s in output_config.split_config.splits)
            jobs = [(input_config.splits[0].pattern, buckets, tuple(split_dirs))]
            examples.set_string_custom_property(SPLIT_KEY, json.dumps(
                spec.split_rule(buckets).to_dict()))
        else:
            jobs = [(split.pattern, (1,), (directory,))
                    for split, directory in zip(input_config.splits, split_dirs)]
        with self._make_beam_pipeline() as pipeline:
            for index, (pattern, buckets, dirs) in enumerate(jobs):
                _ = (pipeline
                     | f"Read[{index}]" >> _CsvRecords(exec_properties, pattern, buckets, dirs)
                     | f"Collect[{index}]" >> beam.combiners.ToList()
                     | f"Finalize[{index}]" >> beam.Map(_finalize, shard_dirs=list(dirs)))
        examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
        examples_utils.set_file_format(examples, "tfrecords_gzip")
        with fileio.open(f"{examples.uri}/{COLUMN_TYPES_FILE}") as handle:
            types = json.load(handle)
        if output_dict.get(SCHEMA_KEY):
            io_utils.write_pbtxt_file(
                f"{artifact_utils.get_single_uri(output_dict[SCHEMA_KEY])}/{SCHEMA_FILE}",
                types_schema(types))
        if chosen:
            # The span is the Examples' own property: downstream and ML Metadata see which data
            # this run trained on; `spans` lists every span of a rolling window.
            examples.span = chosen[-1]
            examples.set_string_custom_property(SPANS_KEY, ",".join(map(str, chosen)))
            examples.set_string_custom_property(DATA_FINGERPRINT_KEY, spans.fingerprint(files))
            encoding = {"types": types, "options": spec.to_dict(),
                        "output_config": exec_properties[
                            standard_component_specs.OUTPUT_CONFIG_KEY],
                        "split_version": row_split.VERSION}
            full = (f"{exec_properties[standard_component_specs.INPUT_BASE_KEY].rstrip('/')}/"
                    f"{spec.span_pattern}")
            examples.set_string_custom_property(SPAN_DATASETS_KEY, json.dumps(
                span_identities(chosen, files, full, encoding)))


class SpanDriver(example_gen_driver.FileBasedDriver):
    """TFX's file-based ExampleGen driver, whose fingerprint (the cache key of the ExampleGen and
    so of everything after it) covers the complete spans this run reads, not every file under
    the pattern: a span still being uploaded changes nothing. LocalDagRunner runs it; open-source
    KFP runs no driver and never caches the ExampleGen (pipeline/definition.py)."""

    def resolve_exec_properties(self, exec_properties, pipeline_info, component_info):
        exec_properties = super().resolve_exec_properties(exec_properties, pipeline_info,
                                                          component_info)
        spec = ExampleGenSpec.from_exec_properties(exec_properties)
        if spec.span_pattern:
            _, files = spec.select_spans(exec_properties[standard_component_specs.INPUT_BASE_KEY])
            exec_properties[example_gen_utils.FINGERPRINT_PROPERTY_NAME] = spans.fingerprint(files)
        return exec_properties


class CsvExampleGenSpec(standard_component_specs.FileBasedExampleGenSpec):
    """TFX's file-based ExampleGen spec, plus the records' types-only schema (types_schema)."""

    OUTPUTS = {**standard_component_specs.FileBasedExampleGenSpec.OUTPUTS,
               SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema)}


class CsvExampleGen(example_gen_component.FileBasedExampleGen):
    """FileBasedExampleGen over CSV with missing-value tokens; its settings are an ExampleGenSpec.
    Outputs `examples` and `schema`, the types the records were encoded with (types_schema)."""

    SPEC_CLASS = CsvExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
    DRIVER_CLASS = SpanDriver

    def __init__(self, input_base: str, spec: ExampleGenSpec,
                 input_config: example_gen_pb2.Input | None = None,
                 output_config: example_gen_pb2.Output | None = None):
        """spec.span_pattern: files under input_base with {SPAN} for the span number; the
        executor resolves it (see components/spans.py), so the input_config pattern must not
        hold {SPAN}."""
        # FileBasedExampleGen.__init__ builds TFX's spec, without the schema: the same, by hand.
        input_config = input_config or example_gen_utils.make_default_input_config()
        component_spec = CsvExampleGenSpec(
            input_base=input_base, input_config=input_config,
            output_config=output_config or example_gen_utils.make_default_output_config(
                input_config),
            custom_config=spec.to_custom_config(), range_config=None,
            output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
            output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
            examples=channel.Channel(type=standard_artifacts.Examples),
            schema=channel.Channel(type=standard_artifacts.Schema))
        super(example_gen_component.FileBasedExampleGen, self).__init__(spec=component_spec)
