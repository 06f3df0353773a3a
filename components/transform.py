"""TFX's Transform with an analyzer cache across spans: a rolling window of K spans analyzes only
the spans it has not seen.

tf.Transform caches each analyzer's accumulator per dataset (`analyzer_cache`), keyed by a dataset
key; TFX derives that key from the dataset's file pattern, which holds the ExampleGen run's own
artifact dir, so no key ever repeats across runs, and feeds the previous cache with a Resolver,
which open-source KFP cannot run. Here:
- each span is its own dataset: the ExampleGen writes a span's records under their own prefix
  (components/csv_example_gen.py `shard_prefix`), and its key is the span's identity (a digest of
  its files, column types, missing tokens and split: equal keys, equal records);
- the cache lives at a fixed place (`analyzer_cache_dir`, under the pipeline root): LATEST there
  names the newest run's cache (and LATEST.files what its files were when written: a cache damaged
  since is passed over, saying so, and every span analyzed anew), which TFX's executor has filled
  with every span of its window (the
  ones it read from the previous cache, copied, and the ones it analyzed). This run reads it and
  points LATEST at its own once it has finished. A run that fails leaves LATEST as it was.
tf.Transform decides per dataset whether its cache holds every analyzer the preprocessing_fn has
(its cache entry keys fingerprint the analyzers), so a changed preprocessing_fn analyzes again.

Without spans there is nothing to reuse, and no cache is written (it costs a Beam stage per
analyzer).
"""

from __future__ import annotations

import contextlib
import json
import uuid

from absl import logging
from tensorflow_transform.beam import analyzer_cache
from tfx.components.transform import component as transform_component
from tfx.components.transform import executor as transform_executor
from tfx.components.transform import labels
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs

from components import integrity
from components.batched_records import batched_reads
from components.compat import beam as beam_compat, tft as tft_compat, tfx as tfx_compat
from components.csv_example_gen import SPAN_DATASETS_KEY
from components.csv_records import shard_prefix

CACHE_DIR_KEY = "lockstep_analyzer_cache_dir"  # in custom_config; removed before preprocessing_fn
LATEST_FILE = "LATEST"
ANALYZED_SPANS_KEY = "analyzed_spans"  # on the transform graph: spans analyzed in this run
CACHED_SPANS_KEY = "cached_spans"  # ... and spans whose analysis came from the cache
CACHE_PASSED_OVER_KEY = "analyzer_cache_passed_over"  # ... and why no cache was read, if damaged
MANIFEST_FILE = "LATEST.files"  # the latest cache's files, as Transform wrote them


def latest_cache(cache_dir: str) -> tuple[str | None, str]:
    """(the newest complete cache under cache_dir or None, why it was passed over or ""): a
    cache whose files are not what Transform wrote (its manifest, components/integrity.py) is
    passed over, and this run analyzes every span anew."""
    pointer = f"{cache_dir}/{LATEST_FILE}"
    if not fileio.exists(pointer):
        return None, ""
    with fileio.open(pointer) as handle:
        uri = handle.read().strip()
    if not (uri and fileio.isdir(uri)):
        return None, ""
    record = f"{cache_dir}/{MANIFEST_FILE}"
    if fileio.exists(record):
        with fileio.open(record) as handle:
            written = json.loads(handle.read())
        found = (written.get("uri") == uri and written.get("files")
                 and integrity.changed(uri, written["files"]))
        if found:
            return None, f"its analyzer cache {uri} passed over: {found[0]} {found[1]}"
    return uri, ""


def _point_latest(cache_dir: str, uri: str) -> None:
    fileio.makedirs(cache_dir)
    files = integrity.manifest(uri)
    if files is not None:  # first: a pointer never names a cache without its record
        _write_atomically(cache_dir, MANIFEST_FILE, json.dumps({"uri": uri, "files": files}))
    _write_atomically(cache_dir, LATEST_FILE, uri)


def _write_atomically(directory: str, name: str, text: str) -> None:
    temp = f"{directory}/.{name}-{uuid.uuid4().hex}"
    with fileio.open(temp, "w") as out:
        out.write(text)
    fileio.rename(temp, f"{directory}/{name}", overwrite=True)


class _SpanDatasets:
    """What TFX's TransformProcessor asks (components/compat/tfx.py, DatasetHooks): each span
    analyzed as its own dataset, keyed by its identity."""

    def __init__(self, span_keys: dict[int, str], input_cache: str | None):
        self._span_keys, self._input_cache = span_keys, input_cache
        self._keys_by_pattern: dict[str, str] = {}
        self.from_cache: set[str] = set()  # dataset keys whose analysis came from the cache

    def inputs(self, inputs: dict) -> dict:
        """One dataset to analyze per span: <split dir>/data_tfrecord-spanSSSSS-*."""
        patterns, formats = [], []
        for pattern, file_format in zip(inputs[labels.ANALYZE_DATA_PATHS_LABEL],
                                        inputs[labels.ANALYZE_PATHS_FILE_FORMATS_LABEL]):
            directory = pattern.rsplit("/", 1)[0]
            for span, key in self._span_keys.items():
                per_span = f"{directory}/{shard_prefix(span)}*"
                if fileio.glob(per_span):  # else the span has no row in this split
                    patterns.append(per_span)
                    formats.append(file_format)
                    self._keys_by_pattern[per_span] = key
        inputs = {**inputs, labels.ANALYZE_DATA_PATHS_LABEL: patterns,
                  labels.ANALYZE_PATHS_FILE_FORMATS_LABEL: formats}
        if self._input_cache:
            inputs[labels.CACHE_INPUT_PATH_LABEL] = self._input_cache
        return inputs

    def datasets(self, datasets: list) -> list:
        if not any(dataset.file_pattern in self._keys_by_pattern for dataset in datasets):
            return datasets  # the datasets to transform, not to analyze
        for dataset in datasets:
            dataset.dataset_key = analyzer_cache.DatasetKey(
                self._keys_by_pattern[dataset.file_pattern])
        datasets.sort(key=lambda dataset: dataset.dataset_key)
        for index, dataset in enumerate(datasets):
            dataset.index = index
        return datasets

    def joined(self, optimized_analyze_data_dict: dict) -> None:
        # A dataset whose every analyzer is in the input cache maps to None here.
        self.from_cache = {key.key for key, dataset in optimized_analyze_data_dict.items()
                           if dataset is None}


class Executor(transform_executor.Executor):
    @beam_compat.spare_fixed_costs  # two fixed costs of Beam's spared: compat/beam.py
    def Do(self, input_dict, output_dict, exec_properties):
        # The executor's three column inspections from one trace of the preprocessing_fn. The
        # same preprocessing for the same data: vocabularies counted exactly, and, where the
        # workers are this process, the analyzers merged in the order the records are read
        # (compat/tft.py, vocabularies_exact and analyzers_in_process, which also writes each
        # vocabulary file in one step).
        in_order = (tft_compat.analyzers_in_process()
                    if beam_compat.workers_are_here(self._beam_pipeline_args or [])
                    else contextlib.nullcontext())
        with batched_reads(), tft_compat.inspections_traced_once(), \
                tft_compat.vocabularies_exact(), in_order:
            self._do(input_dict, output_dict, exec_properties)

    def _do(self, input_dict, output_dict, exec_properties):
        exec_properties = dict(exec_properties)
        custom_config = json.loads(
            exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null") or {}
        cache_dir = custom_config.pop(CACHE_DIR_KEY, "")
        exec_properties[standard_component_specs.CUSTOM_CONFIG_KEY] = json.dumps(custom_config)
        examples = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.EXAMPLES_KEY])
        raw = examples.get_string_custom_property(SPAN_DATASETS_KEY)
        # {span: dataset key}, oldest first; empty: one dataset, no cache.
        span_keys = {int(span): key for span, key in json.loads(raw).items()} if raw else {}
        output_dict = dict(output_dict)
        cache_out = output_dict.get(standard_component_specs.UPDATED_ANALYZER_CACHE_KEY)
        if not (cache_dir and span_keys and cache_out):
            output_dict.pop(standard_component_specs.UPDATED_ANALYZER_CACHE_KEY, None)
            return super().Do(input_dict, output_dict, exec_properties)
        cache, passed_over = latest_cache(cache_dir)
        if passed_over:
            logging.warning("Transform: %s; analyzing every span anew", passed_over)
        spans = _SpanDatasets(span_keys, cache)
        with tfx_compat.transform_processor(spans):
            super().Do(input_dict, output_dict, exec_properties)
        graph = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.TRANSFORM_GRAPH_KEY])
        if passed_over:
            graph.set_string_custom_property(CACHE_PASSED_OVER_KEY, passed_over)
        cached = sorted(span for span, key in span_keys.items()
                        if analyzer_cache.DatasetKey(key).key in spans.from_cache)
        graph.set_string_custom_property(CACHED_SPANS_KEY, ",".join(map(str, cached)))
        graph.set_string_custom_property(ANALYZED_SPANS_KEY, ",".join(
            str(span) for span in sorted(span_keys) if span not in cached))
        _point_latest(cache_dir, artifact_utils.get_single_uri(cache_out))


class Transform(transform_component.Transform):
    """TFX's Transform; analyzer_cache_dir: where the analyzer cache across runs lives (empty: no
    cache)."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, *, analyzer_cache_dir: str = "", custom_config: dict | None = None,
                 **kwargs):
        super().__init__(custom_config={**(custom_config or {}), CACHE_DIR_KEY: analyzer_cache_dir},
                         **kwargs)
