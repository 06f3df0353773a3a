"""What the pipeline's runs did, read back from an ML Metadata store (SQLite, a local pipeline
root): one run's report, or the newest runs for a trend. Reads only; never writes the store."""

from __future__ import annotations

import os

from ml_metadata.proto.metadata_store_pb2 import Execution
from tfx.orchestration import metadata

from pipeline.config import Config
from pipeline.reporting import run_report


_STATES = {Execution.COMPLETE: "executed", Execution.CACHED: "cached", Execution.FAILED: "failed",
           Execution.CANCELED: "canceled", Execution.RUNNING: "running", Execution.NEW: "new"}


def _properties(artifact) -> dict:
    """An artifact's properties, but its files' manifest (components/integrity.py)."""
    from components.integrity import MANIFEST_KEY

    props = {}
    for name, value in list(artifact.properties.items()) + list(artifact.custom_properties.items()):
        if name == MANIFEST_KEY:
            continue
        kind = value.WhichOneof("value")
        props[name] = getattr(value, kind) if kind else None
    return props


def report(config: Config, run_id: str | None = None) -> run_report.RunReport:
    """What one run of the pipeline did (default: the newest), from the ML Metadata store."""
    connection = metadata.sqlite_metadata_connection_config(config.metadata_path)
    with metadata.Metadata(connection) as m:
        runs = m.store.get_contexts_by_type("pipeline_run")
        if not runs:
            raise LookupError(f"no runs in {config.metadata_path}")
        if run_id is None:
            run = max(runs, key=lambda c: c.create_time_since_epoch)
        else:
            run = next((c for c in runs if c.name == run_id), None)
            if run is None:
                raise LookupError(f"no run {run_id!r} in {config.metadata_path} "
                                  "(lockstep runs lists them)")
        return _report(m.store, run)


def history(config: Config, limit: int | None = None) -> list[run_report.RunReport]:
    """The runs of the pipeline in this pipeline root's ML Metadata, newest first (the newest
    `limit` of them)."""
    if not os.path.exists(config.metadata_path):
        return []
    connection = metadata.sqlite_metadata_connection_config(config.metadata_path)
    with metadata.Metadata(connection) as m:
        runs = sorted(m.store.get_contexts_by_type("pipeline_run"),
                      key=lambda c: c.create_time_since_epoch, reverse=True)
        return [_report(m.store, run) for run in runs[:limit]]


def _report(store, run) -> run_report.RunReport:
    executions = store.get_executions_by_context(run.id)
    nodes, outputs = [], {}
    for execution in sorted(executions, key=lambda e: e.create_time_since_epoch):
        node = next((c.name.split(".", 1)[-1]
                     for c in store.get_contexts_by_execution(execution.id)
                     if c.type == "node"), execution.type)
        seconds = (execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000
        nodes.append(run_report.NodeReport(
            node, _STATES.get(execution.last_known_state, "unknown"), seconds))
        events = [e for e in store.get_events_by_execution_ids([execution.id])
                  if e.type == e.OUTPUT]
        artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
        outputs[node] = [run_report.Output(e.path.steps[0].key if e.path.steps else "",
                                           artifacts[e.artifact_id].uri,
                                           _properties(artifacts[e.artifact_id]))
                         for e in events if e.artifact_id in artifacts]
    result = run_report.build(nodes, outputs)
    for execution in executions:
        if "input_base" in execution.custom_properties:
            result.data = execution.custom_properties["input_base"].string_value
    result.run_id = run.name
    result.started = run.create_time_since_epoch / 1000
    return result
