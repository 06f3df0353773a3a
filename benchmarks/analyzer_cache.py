"""Transform over a rolling window of spans: a full analysis of the window beside an incremental one
(the new span analyzed, the others from the analyzer cache, components/transform.py), side by
side in one run, and proof that both give the same transform.

Data: births-like spans (state, weekday, a temperature, a date, births), N rows each. Runs the
real executors (CsvExampleGen, then Transform) in this process, alternating full and incremental
for a few rounds, and prints each Transform's wall time, the ratio of medians and the largest
difference between the two transforms' outputs on the same examples.

usage: python benchmarks/analyzer_cache.py [--rows-per-span N] [--window K] [--rounds R] [--smoke]
--smoke: 200 rows per span, a window of 2, one round (does it run and print its table)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

LABEL = "births"
PATTERN = "span-{SPAN}/*.csv"


def write_span(data: Path, span: int, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed + span)
    days = np.array(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"])
    states = np.array(["AK", "AL", "AR", "AZ", "CA", "CO", "CT", "DE"])
    directory = data / f"span-{span}"
    directory.mkdir(parents=True)
    day = rng.integers(0, 7, rows)
    temperature = rng.normal(15, 8, rows).round(2).astype(str)
    temperature[rng.random(rows) < 0.05] = ""  # missing cells
    with open(directory / "births.csv", "w") as out:
        out.write("state,wday,temperature,date,births\n")
        for s, d, t, n, b in zip(states[rng.integers(0, 8, rows)], days[day], temperature,
                                 rng.integers(1, 28, rows), rng.poisson(200 + 20 * day)):
            out.write(f"{s},{d},{t},2000-01-{n:02d},{b}\n")
    (directory / "_SUCCESS").write_text("")


def ingest(data: Path, window: int, out: Path):
    """The CsvExampleGen executor over the newest `window` spans: an Examples artifact."""
    from tfx.proto import example_gen_pb2
    from tfx.types import standard_artifacts
    from tfx.utils import proto_utils
    from google.protobuf import json_format

    from components import csv_example_gen, example_gen_spec

    examples = standard_artifacts.Examples()
    examples.uri = str(out)
    output_config = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)]))
    custom = example_gen_spec.ExampleGenSpec(LABEL, ("", "NA"), PATTERN, window).to_custom_config()
    csv_example_gen.Executor().Do({}, {"examples": [examples]}, {
        "input_base": str(data),
        "input_config": proto_utils.proto_to_json(example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="single_split", pattern="*")])),
        "output_config": proto_utils.proto_to_json(output_config),
        "custom_config": json_format.MessageToJson(custom)})
    return examples


def infer_schema(examples, out: Path):
    import tensorflow_data_validation as tfdv
    from tfx.types import standard_artifacts

    stats = tfdv.generate_statistics_from_tfrecord(
        f"{examples.uri}/Split-train/*", stats_options=tfdv.StatsOptions())
    schema = tfdv.infer_schema(stats, infer_feature_shape=False)
    out.mkdir(parents=True)
    tfdv.write_schema_text(schema, str(out / "schema.pbtxt"))
    artifact = standard_artifacts.Schema()
    artifact.uri = str(out)
    return artifact


def transform(examples, schema, out: Path, cache_dir: str) -> tuple[float, object]:
    """Our Transform executor (analysis only, as the pipeline runs it); cache_dir "" for none.
    Returns its wall time and its transform graph artifact."""
    from tfx.types import standard_artifacts

    from components.transform import CACHE_DIR_KEY, Executor
    from pipeline.definition import PREPROCESSING_FN
    from trainer_module.custom_config import TransformSpec

    graph, cache = standard_artifacts.TransformGraph(), standard_artifacts.TransformCache()
    graph.uri, cache.uri = str(out / "graph"), str(out / "cache")
    config = {**TransformSpec(LABEL, "regression", timestamps=("date",)).to_custom_config(),
              CACHE_DIR_KEY: cache_dir}
    start = time.perf_counter()
    Executor().Do({"examples": [examples], "schema": [schema]},
                  {"transform_graph": [graph], "updated_analyzer_cache": [cache]},
                  {"preprocessing_fn": PREPROCESSING_FN, "custom_config": json.dumps(config),
                   "disable_statistics": 1, "force_tf_compat_v1": 0,
                   "splits_config": None})
    return time.perf_counter() - start, graph


def largest_difference(graph_a, graph_b, examples) -> float:
    """The largest difference between the two transforms' outputs on the eval split's examples."""
    import tensorflow as tf
    import tensorflow_transform as tft

    records = [r.numpy() for r in tf.data.TFRecordDataset(
        tf.io.gfile.glob(f"{examples.uri}/Split-eval/*"), compression_type="GZIP").take(2000)]
    outputs = []
    for graph in (graph_a, graph_b):
        output = tft.TFTransformOutput(graph.uri)
        parsed = tf.io.parse_example(records, output.raw_feature_spec())
        outputs.append(output.transform_features_layer()(parsed))
    worst = 0.0
    for key, value in outputs[0].items():
        a, b = value, outputs[1][key]
        if isinstance(a, tf.SparseTensor):
            a, b = a.values, b.values
        worst = max(worst, float(tf.reduce_max(tf.abs(tf.cast(a, tf.float64) -
                                                       tf.cast(b, tf.float64)))))
    return worst


def window_runs(work: Path, rows: int, window: int):
    """Spans 1..window, then span window+1 arrives. Returns (full seconds, incremental seconds,
    largest difference, the incremental graph)."""
    data = work / "data"
    for span in range(1, window + 1):
        write_span(data, span, rows)
    first = ingest(data, window, work / "examples-1")
    schema = infer_schema(first, work / "schema")
    cache_dir = str(work / "analyzer_cache")
    transform(first, schema, work / "transform-1", cache_dir)  # fills the cache
    write_span(data, window + 1, rows)
    second = ingest(data, window, work / "examples-2")
    incremental, graph = transform(second, schema, work / "transform-2", cache_dir)
    full, full_graph = transform(second, schema, work / "transform-2-full", "")
    return full, incremental, largest_difference(graph, full_graph, second), graph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows-per-span", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="200 rows a span, window 2, once")
    args = parser.parse_args()
    if args.smoke:
        args.rows_per_span, args.window, args.rounds = 200, 2, 1
    fulls, incrementals = [], []
    for i in range(args.rounds):
        work = Path(tempfile.mkdtemp(prefix="lockstep-analyzer-cache-"))
        full, incremental, difference, graph = window_runs(work, args.rows_per_span, args.window)
        fulls.append(full)
        incrementals.append(incremental)
        print(f"round {i + 1}: full analysis of {args.window} spans {full:.1f}s, incremental "
              f"(spans {graph.get_string_custom_property('cached_spans')} from the cache, "
              f"{graph.get_string_custom_property('analyzed_spans')} analyzed) "
              f"{incremental:.1f}s; largest output difference {difference:.2e}", flush=True)
    full, incremental = statistics.median(fulls), statistics.median(incrementals)
    print(f"\nmedian of {args.rounds}, {args.rows_per_span} rows per span, window {args.window}: "
          f"Transform full {full:.1f}s, incremental {incremental:.1f}s "
          f"(x{full / incremental:.2f} faster)")


if __name__ == "__main__":
    main()
