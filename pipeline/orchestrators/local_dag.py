"""The `local` orchestrator (the default): the pipeline in this process with TFX's launcher in two
lanes (pipeline/local/dag_runner.py), ML Metadata in the pipeline root; a node whose cached output
is not what it wrote runs again, once.

Registered in pipeline/orchestrators/__init__.py; `lockstep verify` runs it up to Transform."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline import errors
from pipeline.binding import HERE
from pipeline.config import Config
from pipeline.node_ids import BASELINE_NODE, EXAMPLE_GEN_NODE

if TYPE_CHECKING:
    from pipeline.local.console import Console
    from pipeline.local.node_worker import Worker
    from pipeline.reporting.run_report import RunReport

# Never served from the cache: LatestPushedModel looks in the serving dir, outside the pipeline.
# The ExampleGen's files can change under the same data root (a new span), but TFX's ExampleGen
# driver, which runs here, fingerprints the input files into its cache key: a new span misses.
NEVER_CACHED = (BASELINE_NODE,)


def run(prepared, console: Console) -> RunReport:
    """The whole pipeline. In a process where no TensorFlow op can have run (a `lockstep run`
    process, TensorFlow not imported yet: trainer_module/fork_safety.may_fork), the second lane's
    worker and the serving check's process are this process, forked once the runner's imports
    are done (pipeline/local/node_worker.py, components/serving_check.py); elsewhere (a test's
    process, a notebook) fresh interpreters, the worker's started beside this one's imports."""
    from components import serving_check
    from pipeline.local import node_worker
    from runtime import processes
    from trainer_module import fork_safety

    fresh = fork_safety.may_fork()
    worker = None if fresh else node_worker.Worker.if_useful()  # its imports beside ours
    try:  # TFX's imports here; run_dag uses them
        with processes.imports_uncollected():
            from pipeline.local import dag_runner  # noqa: F401 - imported for its imports, uncollected
        if fresh:
            worker = node_worker.Worker.if_useful(fork=True)
            serving_check.prewarm_by_fork()  # after the worker's fork: the worker holds none
    except BaseException:
        if worker is not None:
            worker.close()
        raise
    return run_dag(prepared, console, worker)


def run_dag(prepared, console: Console, worker: Worker | None = None,
            to_node: str | None = None) -> RunReport:
    """The pipeline with LocalDagRunner (pipeline/local/dag_runner.py) on what the ExampleGen
    reads (Prepared.source: local or remote data alike), and once more without the cache for a
    node whose cached output is not what it wrote (its files' manifest, components/integrity.py)
    or, without a manifest, for the ExampleGen whose cached output does not read: that node runs
    again, saying why on the console.

    Args:
      worker: the second lane's process (dag_runner.run starts one where useful when None).
      to_node: run the nodes up to this one alone (`lockstep verify` stops after Transform).
    Returns:
      the run's report, read back from ML Metadata.
    Raises:
      the node's own error; errors.PipelineFailed: the same node's output corrupt again after it
      ran anew, naming the file.
    """
    from pipeline.local import dag_runner

    config = prepared.config
    input_base, pattern = prepared.source
    uncached: tuple[str, ...] = ()
    while True:
        try:
            return dag_runner.run(config, input_base, pattern, prepared.decisions,
                                  to_node=to_node, worker=worker,
                                  uncached=NEVER_CACHED + uncached)
        except dag_runner.NodeFailed as failed:
            worker = None  # closed by that run; the next starts its own
            node, path, line = _corrupt_cache(failed, config)
            if node in uncached:
                raise errors.PipelineFailed(
                    f"{node}'s output is corrupt again after it ran anew: {path}; check the disk "
                    "under the pipeline root") from None
            console.line(line)
            uncached += (node,)


def _corrupt_cache(failed, config: Config) -> tuple[str, str, str]:
    """(node, path, line) for a run that failed on a corrupt cached output: the node that made
    it, the file, what the console says. Raises the failure's own error for any other."""
    from components import integrity
    from pipeline.reporting import metadata_store

    error = failed.error
    try:  # the failure's line names the node (`failure`)
        error.lockstep_node = failed.node
    except AttributeError:
        pass
    if isinstance(error, integrity.CorruptArtifact):
        return error.node, error.path, (
            f"lockstep: {error.node}'s cached {error.output} is not what {error.node} wrote: "
            f"{error.path} {error.why}; running {error.node} again, not from the cache")
    if not integrity.is_read_error(error):
        raise error from None
    producer = EXAMPLE_GEN_NODE
    examples = metadata_store.report(config, failed.run_id).artifacts.get(f"{producer}.examples")
    found = integrity.corrupt_file(examples) if examples else None
    if found is None:
        raise errors.PipelineFailed(
            f"{failed.node} could not read its input ({type(error).__name__}), and every file "
            f"of {producer}'s output {examples} reads whole") from None
    path, why = found
    return producer, path, (
        f"lockstep: {failed.node} could not read {producer}'s cached output: {path} is corrupt "
        f"({why}); running {producer} again, not from the cache")


class LocalDag:
    name = "local"
    help = "TFX's launcher in this process, in two lanes (the default)"
    binding = HERE
    never_cached = NEVER_CACHED
    compile = None

    def run(self, prepared, console: Console) -> RunReport:
        return run(prepared, console)

    def past_runs(self, config: Config, limit: int | None = None) -> list[RunReport]:
        """Its runs in the pipeline root's ML Metadata, newest first."""
        from pipeline.reporting import metadata_store

        return metadata_store.history(config, limit)


ORCHESTRATOR = LocalDag()
