"""Runs the pipeline with TFX's LocalDagRunner, under a run id of its own, and reads that run back
from ML Metadata (pipeline/reporting/metadata_store.py)."""

from __future__ import annotations

import datetime
import os

from tfx.dsl.compiler import compiler, constants
from tfx.orchestration.portable import runtime_parameter_utils
from tfx.orchestration.local.local_dag_runner import LocalDagRunner

from pipeline import pipeline as pipeline_lib
from pipeline.config import Config
from pipeline.reporting import metadata_store, run_report


def compile_ir(pipeline):
    ir = compiler.Compiler().compile(pipeline)
    for node in ir.nodes:
        if node.pipeline_node.node_info.id in pipeline_lib.NEVER_CACHED_LOCAL:
            node.pipeline_node.execution_options.caching_options.enable_cache = False
    return ir


def run(config: Config, input_base: str, pattern: str, decisions,
        to_node: str | None = None) -> run_report.RunReport:
    """decisions: pipeline/preflight.py's, for this config and data. to_node: run the nodes up to
    this one alone (the same pipeline, ML Metadata and cache as a whole run)."""
    os.makedirs(config.paths.pipeline_root, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(config.metadata_path)), exist_ok=True)
    pipeline = pipeline_lib.create_pipeline(config, input_base, pattern, decisions, to_node=to_node)
    ir = compile_ir(pipeline)
    # This process's own run id (LocalDagRunner would take the wall clock alone): the report
    # below reads this run, not whichever run of the pipeline is newest.
    run_id = (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%S.%f}Z"
              f"-{os.getpid()}")
    runtime_parameter_utils.substitute_runtime_parameter(
        ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id})
    LocalDagRunner().run_with_ir(ir)
    return metadata_store.report(config, run_id)
