"""What the run report reads from a run's artifacts (found through the RunReport, either runner),
through components/fs.py so a pipeline root on an object store reads too: the statistics, the
schema, the anomalies, the Trainer's curve, the Evaluator's thresholds."""

from __future__ import annotations

import json

from components import fs


def statistics(uri: str) -> dict:
    """{split: its DatasetFeatureStatistics} from a StatisticsGen artifact."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    splits = {}
    for path in fs.glob(fs.join(uri, "Split-*", "FeatureStats.pb")):
        split = path.rsplit("/", 2)[-2][len("Split-"):]
        stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(fs.read_bytes(path))
        splits[split] = stats.datasets[0]
    return splits


def schema(uri: str | None):
    """The Schema SchemaGen wrote (None without one)."""
    path = fs.join(uri, "schema.pbtxt") if uri else ""
    if not path or not fs.exists(path):
        return None
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    return text_format.Parse(fs.read_text(path), schema_pb2.Schema())


def anomalies(uri: str | None) -> list[tuple[str, str, str, str]]:
    """[(split, feature, short description, description)] ExampleValidator found."""
    found = []
    if uri:
        from tensorflow_metadata.proto.v0 import anomalies_pb2

        for path in fs.glob(fs.join(uri, "Split-*", "SchemaDiff.pb")):
            split = path.rsplit("/", 2)[-2][len("Split-"):]
            read = anomalies_pb2.Anomalies.FromString(fs.read_bytes(path))
            found += [(split, name, info.short_description, info.description)
                      for name, info in read.anomaly_info.items()]
    return found


def training_curve(model_run_uri: str) -> dict[str, list[tuple[int, float]]]:
    """{scalar name: [(step, value)]} from the Trainer's TensorBoard events."""
    import tensorflow as tf

    curves: dict[str, list[tuple[int, float]]] = {}
    from tensorflow.core.util import event_pb2

    for path in fs.glob(fs.join(model_run_uri, "train", "events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                number = (float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
                          else value.simple_value)
                curves.setdefault(value.tag, []).append((event.step, number))
    return {tag: sorted(points) for tag, points in curves.items()}


def thresholds(uri: str | None) -> list[str]:
    """The gate, in words, from TFMA's eval config as the Evaluator ran it (its evaluation
    artifact)."""
    from pipeline.reporting.summary_text import bound_in_words

    path = fs.join(uri, "eval_config.json") if uri else ""
    if not path or not fs.exists(path):
        return []
    from google.protobuf import json_format
    from tensorflow_model_analysis.proto import config_pb2

    stored = json.loads(fs.read_text(path))
    config = json_format.ParseDict(stored.get("evalConfig", stored), config_pb2.EvalConfig(),
                                   ignore_unknown_fields=True)
    lines = []
    for spec in config.metrics_specs:
        for metric in spec.metrics:
            thresholds = [metric.threshold] if metric.HasField("threshold") else []
            thresholds += [t.threshold for t in metric.per_slice_thresholds]
            for threshold in thresholds:
                lines.append(f"{metric.class_name}: {bound_in_words(threshold)}")
    return lines
