"""CsvExampleGen on Arrow: CSV files to tf.Examples in GZIP TFRecords, with Beam, at C++ speed.

TFX's stock CsvExampleGen types a column from its cells as they are, so the penguins source's `NA`
turns a numeric column into a string one, and it handles each row and cell in Python. This one
treats the configured missing tokens (`NA`, empty, `NaN`, ...) as absent features, types each
column over the whole input, and fails with the file, column and line of a cell that does not fit
(components/csv_format.py). Its Beam pipeline (components/csv_records.py) moves byte ranges of
files, never rows, and reads them twice, once to type the columns and once to encode: memory stays
bounded (no record is held between the passes). Each worker writes its record batches to
temporary files in the split directories, each with its columnar copy (the same rows as Arrow
columns, which StatisticsGen and Transform read instead of decoding the records:
components/columnar_examples.py); one final step names them. It is a
FileBasedExampleGen, so input/output configs work as in TFX; its hash buckets are filled by
components/row_split.py (by each row's position, or by group columns, never by the label: TFX
hashes each row's content, which splits a table of repeated rows by its label); spans are
resolved by this executor (components/spans.py), so they work on every
orchestrator.
"""

from __future__ import annotations

import json

import apache_beam as beam
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

from components import csv_records, row_split, spans
from components.compat import beam as beam_compat
from components.example_gen_spec import ExampleGenSpec

SPANS_KEY = "spans"
DATA_FINGERPRINT_KEY = "data_fingerprint"  # spans.fingerprint of the chosen spans' files
# {span: its identity}, JSON: a digest of everything that decides a span's records (its files, the
# column types, the missing tokens, the split), so equal identities mean equal records. Transform
# keys its analyzer cache on it (components/transform.py).
SPAN_DATASETS_KEY = "span_datasets"
# On the Examples: the split rule, JSON (row_split.SplitRule.to_dict): the summary and report say it.
SPLIT_KEY = "split_rule"
SCHEMA_KEY = standard_component_specs.SCHEMA_KEY  # the types-only schema's output key
SCHEMA_FILE = "schema.pbtxt"  # its file, SchemaGen's name


class Executor(BaseExampleGenExecutor):
    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return csv_records.CsvRecords

    @beam_compat.spare_fixed_costs  # two fixed costs of Beam's spared: compat/beam.py
    def Do(self, input_dict, output_dict, exec_properties):
        """TFX's ExampleGen, with the records never passing one by one through Beam: each
        worker writes its batches' records straight to files (components/csv_records.py)."""
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
                     | f"Read[{index}]" >> csv_records.CsvRecords(exec_properties, pattern, buckets, dirs)
                     | f"Collect[{index}]" >> beam.combiners.ToList()
                     | f"Finalize[{index}]" >> beam.Map(csv_records.finalize, shard_dirs=list(dirs)))
        examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
        examples_utils.set_file_format(examples, "tfrecords_gzip")
        with fileio.open(f"{examples.uri}/{csv_records.COLUMN_TYPES_FILE}") as handle:
            types = json.load(handle)
        if output_dict.get(SCHEMA_KEY):
            io_utils.write_pbtxt_file(
                f"{artifact_utils.get_single_uri(output_dict[SCHEMA_KEY])}/{SCHEMA_FILE}",
                csv_records.types_schema(types))
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
                csv_records.span_identities(chosen, files, full, encoding)))


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
