"""CsvExampleGen that understands missing values: CSV files to tf.Examples in TFRecords, with Beam.

TFX's stock CsvExampleGen types a column from its cells as they are, so the penguins source's `NA`
turns a numeric column into a string one. This ExampleGen reads the same files, treats the
configured missing tokens (`NA`, empty, `NaN`, ...) as absent features, types each column over the
whole input (components/csv_format.py), and fails with the file, column and line of a cell that
does not fit. It is a FileBasedExampleGen, so input/output configs and hash splits work as in TFX;
spans are resolved by this executor (components/spans.py), so they work on every orchestrator.
"""

from __future__ import annotations

import io
from typing import Any

import apache_beam as beam
import tensorflow as tf
from google.protobuf import any_pb2, json_format, struct_pb2
from tfx.components.example_gen import component as example_gen_component
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs

from components import csv_format, spans

SPANS_KEY = "spans"


def make_custom_config(label: str, missing_values: list[str], span_pattern: str = "",
                       span_window: int = 1) -> example_gen_pb2.CustomConfig:
    struct = struct_pb2.Struct()
    struct.update({"label": label, "missing_values": list(missing_values),
                   "span_pattern": span_pattern, "span_window": span_window})
    packed = any_pb2.Any()
    packed.Pack(struct)
    return example_gen_pb2.CustomConfig(custom_config=packed)


def read_custom_config(exec_properties: dict[str, Any]) -> dict[str, Any]:
    raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    if not raw:
        return {}
    config = example_gen_pb2.CustomConfig()
    json_format.Parse(raw, config)
    struct = struct_pb2.Struct()
    config.custom_config.Unpack(struct)
    return json_format.MessageToDict(struct)


def _open_text(path: str) -> io.StringIO:
    with fileio.open(path, "rb") as handle:
        data = handle.read()
    try:
        return io.StringIO(data.decode("utf-8-sig"), newline="")
    except UnicodeDecodeError as err:
        raise csv_format.CsvError(f"{path}: not UTF-8 text (byte {err.start})") from None


def _read_file(path: str, header: list[str]):
    text = _open_text(path)
    if csv_format.read_header(path, text) != header:
        raise csv_format.CsvError(f"{path}: its header differs from the other CSV files'")
    text.seek(0)
    for line, cells in csv_format.iter_rows(path, text, header):
        yield path, line, cells


class _ProfileColumns(beam.CombineFn):
    def __init__(self, width: int, missing: frozenset[str]):
        self._width, self._missing = width, missing

    def create_accumulator(self):
        return [csv_format.ColumnProfile() for _ in range(self._width)]

    def add_input(self, acc, row):
        path, line, cells = row
        for profile, cell in zip(acc, cells):
            profile.add(cell, self._missing, (path, line))
        return acc

    def merge_accumulators(self, accs):
        accs = list(accs)
        merged = accs[0]
        for acc in accs[1:]:
            merged = [a.merge(b) for a, b in zip(merged, acc)]
        return merged

    def extract_output(self, acc):
        return acc


def _to_example(row, types: dict[str, str], header: list[str], missing: frozenset[str]):
    _, _, cells = row
    feature = {}
    for name, cell in zip(header, cells):
        cell = cell.strip()
        kind = types[name]
        if cell in missing:
            value = tf.train.Feature()  # present in the schema, absent in this example
        elif kind == csv_format.INT:
            value = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(cell)]))
        elif kind == csv_format.FLOAT:
            value = tf.train.Feature(float_list=tf.train.FloatList(value=[float(cell)]))
        else:
            value = tf.train.Feature(bytes_list=tf.train.BytesList(value=[cell.encode()]))
        feature[name] = value
    return tf.train.Example(features=tf.train.Features(feature=feature))


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def _CsvToExample(pipeline: beam.Pipeline, exec_properties: dict[str, Any], split_pattern: str):
    input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    options = read_custom_config(exec_properties)
    if options.get("span_pattern"):
        pattern = f"{input_base.rstrip('/')}/{options['span_pattern']}"
        _, files = spans.select(input_base, options["span_pattern"],
                                int(options.get("span_window", 1)))
    else:
        pattern = f"{input_base.rstrip('/')}/{split_pattern}"
        files = sorted(fileio.glob(pattern))
    if not files:
        raise csv_format.CsvError(f"{pattern}: no CSV file matches")
    missing = frozenset(options.get("missing_values", csv_format.DEFAULT_MISSING_VALUES))
    header = csv_format.read_header(files[0], _open_text(files[0]))
    label = options.get("label")
    if label and label not in header:
        raise csv_format.CsvError(
            f"{files[0]}: label column '{label}' is not in the header ({', '.join(header)})")

    rows = (pipeline
            | "Files" >> beam.Create(files)
            | "ReadRows" >> beam.FlatMap(_read_file, header=header)
            | "Reshuffle" >> beam.Reshuffle())
    types = (rows
             | "Profile" >> beam.CombineGlobally(_ProfileColumns(len(header), missing))
             | "Types" >> beam.Map(lambda profiles: csv_format.column_types(header, profiles, pattern)))
    return rows | "ToExample" >> beam.Map(
        _to_example, types=beam.pvalue.AsSingleton(types), header=header, missing=missing)


class Executor(BaseExampleGenExecutor):
    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return _CsvToExample

    def Do(self, input_dict, output_dict, exec_properties):
        options = read_custom_config(exec_properties)
        chosen = []
        if options.get("span_pattern"):
            chosen, _ = spans.select(exec_properties[standard_component_specs.INPUT_BASE_KEY],
                                     options["span_pattern"], int(options.get("span_window", 1)))
        super().Do(input_dict, output_dict, exec_properties)
        if chosen:
            # The span is the Examples' own property: downstream and ML Metadata see which data
            # this run trained on; `spans` lists every span of a rolling window.
            examples = artifact_utils.get_single_instance(
                output_dict[standard_component_specs.EXAMPLES_KEY])
            examples.span = chosen[-1]
            examples.set_string_custom_property(SPANS_KEY, ",".join(map(str, chosen)))


class CsvExampleGen(example_gen_component.FileBasedExampleGen):
    """FileBasedExampleGen over CSV with missing-value tokens; label and tokens via custom_config."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, input_base: str, label: str, missing_values: list[str],
                 span_pattern: str = "", span_window: int = 1, **kwargs):
        """span_pattern: files under input_base with {SPAN} for the span number; the executor
        resolves it (see components/spans.py), so the input_config pattern must not hold {SPAN}."""
        super().__init__(
            input_base=input_base,
            custom_config=make_custom_config(label, missing_values, span_pattern, span_window),
            **kwargs)
