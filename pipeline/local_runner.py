"""Runs the pipeline with LocalDagRunner and reports what happened, read back from ML Metadata."""

from __future__ import annotations

import dataclasses
import json
import os

from tfx.dsl.compiler import compiler
from tfx.orchestration import metadata
from tfx.orchestration.local.local_dag_runner import LocalDagRunner

from components import latest_model
from components.csv_example_gen import SPANS_KEY
from pipeline import pipeline as pipeline_lib
from trainer_module.run import SUMMARY_FILE
from pipeline.config import Config

# Nodes whose output depends on the world outside the pipeline: never served from the cache.
NEVER_CACHED = (pipeline_lib.BASELINE_NODE,)


@dataclasses.dataclass
class NodeReport:
    node: str
    state: str  # executed | cached | failed | ...
    seconds: float


@dataclasses.dataclass
class RunReport:
    nodes: list[NodeReport]
    metrics: dict[str, float]
    blessed: bool | None
    pushed_to: str | None
    spans: list[int] = dataclasses.field(default_factory=list)  # the spans the examples came from
    baseline: str | None = None  # the pushed model the Evaluator compared with
    training: dict = dataclasses.field(default_factory=dict)  # trainer_module.run's summary

    def describe(self) -> str:
        lines = ["Components:"]
        lines += [f"  {n.node:<20} {n.state:<9} {n.seconds:6.1f}s" for n in self.nodes]
        if self.spans:
            lines.append("Data: span " + ", ".join(map(str, self.spans)))
        if self.training:
            t = self.training
            lines.append(f"Trainer: {t.get('strategy')} on {t.get('replicas')} replica(s), "
                         f"{t.get('plan', {}).get('train_steps')} steps"
                         + (f", warm-started from {t.get('base_model')}" if t.get("warm_started") else ""))
        lines.append(f"Baseline: {self.baseline}" if self.baseline else "Baseline: none (first model)")
        if self.metrics:
            lines.append("Eval metrics: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(self.metrics.items())))
        lines.append(f"Blessed: {'yes' if self.blessed else 'no'}")
        lines.append(f"Model pushed to: {self.pushed_to}" if self.pushed_to else "Model not pushed")
        return "\n".join(lines)


def compile_ir(pipeline):
    ir = compiler.Compiler().compile(pipeline)
    for node in ir.nodes:
        if node.pipeline_node.node_info.id in NEVER_CACHED:
            node.pipeline_node.execution_options.caching_options.enable_cache = False
    return ir


def run(config: Config, input_base: str, pattern: str, task: str) -> RunReport:
    os.makedirs(config.paths.pipeline_root, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(config.metadata_path)), exist_ok=True)
    pipeline = pipeline_lib.create_pipeline(config, input_base, pattern, task)
    LocalDagRunner().run_with_ir(compile_ir(pipeline))
    return report(config)


_STATES = {2: "executed", 3: "executed", 4: "failed", 5: "cached", 6: "canceled"}


def report(config: Config) -> RunReport:
    """What the newest run of the pipeline did, from the ML Metadata store."""
    connection = metadata.sqlite_metadata_connection_config(config.metadata_path)
    with metadata.Metadata(connection) as m:
        store = m.store
        runs = store.get_contexts_by_type("pipeline_run")
        latest = max(runs, key=lambda c: c.create_time_since_epoch)
        executions = store.get_executions_by_context(latest.id)
        nodes, outputs = [], {}
        for execution in sorted(executions, key=lambda e: e.create_time_since_epoch):
            node = next((c.name.split(".", 1)[-1]
                         for c in store.get_contexts_by_execution(execution.id)
                         if c.type == "node"), execution.type)
            seconds = (execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000
            nodes.append(NodeReport(node, _STATES.get(execution.last_known_state, "running"), seconds))
            events = store.get_events_by_execution_ids([execution.id])
            ids = [e.artifact_id for e in events if e.type == e.OUTPUT]
            outputs[node] = store.get_artifacts_by_id(ids) if ids else []
    metrics, blessed, pushed_to = {}, None, None
    for artifact in outputs.get("Evaluator", []):
        if artifact.type == "ModelEvaluation":
            metrics = _read_metrics(artifact.uri)
        if artifact.type == "ModelBlessing":
            blessed = bool(artifact.custom_properties["blessed"].int_value)
    for artifact in outputs.get("Pusher", []):
        if artifact.custom_properties["pushed"].int_value:
            pushed_to = artifact.custom_properties["pushed_destination"].string_value
    spans, baseline, training = [], None, {}
    for artifact in outputs.get("CsvExampleGen", []):
        listed = artifact.custom_properties.get(SPANS_KEY)
        if listed is not None and listed.string_value:
            spans = [int(x) for x in listed.string_value.split(",")]
    for artifact in outputs.get(pipeline_lib.BASELINE_NODE, []):
        props = artifact.custom_properties
        if latest_model.FOUND_KEY in props and props[latest_model.FOUND_KEY].int_value:
            baseline = props[latest_model.SOURCE_KEY].string_value
    for artifact in outputs.get("Trainer", []):
        summary = os.path.join(artifact.uri, SUMMARY_FILE)
        if artifact.type == "ModelRun" and os.path.exists(summary):
            with open(summary) as handle:
                training = json.load(handle)
    return RunReport(nodes, metrics, blessed, pushed_to, spans, baseline, training)


def _read_metrics(uri: str) -> dict[str, float]:
    import tensorflow_model_analysis as tfma

    result = tfma.load_metrics(uri)
    out = {}
    for per_slice in result:
        if per_slice.slice_key.single_slice_keys:
            continue
        for kv in per_slice.metric_keys_and_values:
            if kv.key.model_name and kv.key.model_name != "candidate":
                continue
            if kv.value.HasField("double_value"):
                name = kv.key.name + (" (baseline diff)" if kv.key.is_diff else "")
                out[name] = kv.value.double_value.value
    return out
