"""ExampleValidator that stops the run: anomalies raise, with a readable summary, before training."""

from __future__ import annotations

import os

from tfx.components.example_validator.component import ExampleValidator as _StockExampleValidator
from tfx.components.example_validator import executor as stock_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils
from tensorflow_metadata.proto.v0 import anomalies_pb2

from runtime import exit_status


class AnomaliesFound(RuntimeError):
    """The data does not match the schema; the message lists each anomaly, one per line."""

    lockstep_exit_status = exit_status.FAILED


def summarize(anomalies_by_split: dict[str, anomalies_pb2.Anomalies]) -> list[str]:
    lines = []
    for split, anomalies in sorted(anomalies_by_split.items()):
        for feature, info in sorted(anomalies.anomaly_info.items()):
            lines.append(f"{split}: feature '{feature}': {info.short_description}"
                         f" ({info.description})")
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            lines.append(f"{split}: dataset: {info.short_description} ({info.description})")
    return lines


def read_anomalies(anomalies_artifact) -> dict[str, anomalies_pb2.Anomalies]:
    found = {}
    for split in artifact_utils.decode_split_names(anomalies_artifact.split_names):
        path = os.path.join(artifact_utils.get_split_uri([anomalies_artifact], split),
                            stock_executor.DEFAULT_FILE_NAME)
        anomalies = anomalies_pb2.Anomalies()
        anomalies.ParseFromString(io_utils.read_bytes_file(path))
        found[split] = anomalies
    return found


class Executor(stock_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):
        result = super().Do(input_dict, output_dict, exec_properties)
        artifact = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.ANOMALIES_KEY])
        lines = summarize(read_anomalies(artifact))
        if lines:
            raise AnomaliesFound(
                f"ExampleValidator found {len(lines)} anomalies, training stopped:\n  "
                + "\n  ".join(lines))
        return result


class ExampleValidator(_StockExampleValidator):
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
