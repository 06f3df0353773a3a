"""Runs the pipeline here, under a run id of its own, and reads that run back from ML Metadata
(pipeline/reporting/metadata_store.py).

TFX's LocalDagRunner launches one node after another. This runner launches them the same way
(pipeline/local/node_worker.py: TFX's launcher, driver, cache and ML Metadata as LocalDagRunner
uses them) in two lanes: this process, and a worker process started as the run begins (it
imports TFX while the ExampleGen runs). Each lane takes the first node, in the compiled order,
whose upstream nodes have finished, so nodes whose inputs are ready run side by side: the
validation branch (StatisticsGen, SchemaGen, ExampleValidator) beside Transform, each
single-threaded inside; then the gradient-boosting reference in the lane the validation branch
freed, beside the end of Transform (or beside the Trainer, when both are ready at once). The
Trainer runs in this process (its progress lines, emulated replicas). Until the worker is ready,
this process takes every node: a cached run never waits for it. On one core there is one lane.

SIGTERM (a `kill`, a scheduler ending the job) stops a run cleanly: while the Trainer trains, it
saves a checkpoint at the step it reached first (runtime/termination.py) and the next run
resumes there (trainer_module/resume.py); at any other time the run raises Stopped, naming the
nodes that ran, whichever lane they ran in, and their executions are recorded as failed in ML
Metadata. A stop is never lost: a raise that a node's code swallows is raised again at the next
hand-over between nodes, and the signal comes again until the run has stopped. The next run
reuses what completed.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading

from components import serving_check
from components.compat import tfx as tfx_compat
from pipeline import definition
from pipeline.config import Config
from pipeline.local import node_worker
from pipeline.reporting import metadata_store, run_report
from runtime import termination

_log = logging.getLogger(__name__)

# Nodes this process runs itself: the Trainer's progress records reach the console from here,
# and emulated replicas are configured in this process before TensorFlow starts; the Evaluator
# finds here the serving check prewarmed as training began (components/serving_check.py).
IN_PROCESS = (definition.TRAINER_NODE, definition.EVALUATOR_NODE)


# SIGTERM stopped the run between or inside nodes other than the Trainer's training.
Stopped = termination.Stopped


class NodeFailed(Exception):
    """A node of a run failed: which node, in which run (ML Metadata's run id), and its error
    (raised from it)."""

    def __init__(self, node: str, run_id: str, error: BaseException):
        super().__init__(f"{node}: {type(error).__name__}: {error}")
        self.node, self.run_id, self.error = node, run_id, error


def compile_ir(pipeline, uncached: tuple[str, ...] = ()):
    """The pipeline's IR, with caching off for `uncached`: the nodes the orchestrator never takes
    from the cache (pipeline/orchestrators/local_dag.py), and a node whose cached output is
    damaged."""
    ir = tfx_compat.compile_ir(pipeline)
    for node in ir.nodes:
        if node.pipeline_node.node_info.id in uncached:
            node.pipeline_node.execution_options.caching_options.enable_cache = False
    return ir


def compile_run(pipeline, uncached: tuple[str, ...] = ()):
    """(IR, run id): the pipeline compiled for one run under this process's own run id
    (LocalDagRunner would take the wall clock alone), so a report reads this run, not whichever
    run of the pipeline is newest."""
    ir = compile_ir(pipeline, uncached)
    run_id = (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%S.%f}Z"
              f"-{os.getpid()}")
    tfx_compat.set_run_id(ir, run_id)
    return ir, run_id


def run(config: Config, input_base: str, pattern: str, decisions,
        to_node: str | None = None, worker: node_worker.Worker | None = None,
        uncached: tuple[str, ...] = ()) -> run_report.RunReport:
    """decisions: pipeline/preflight.py's, for this config and data. to_node: run the nodes up to
    this one alone (the same pipeline, ML Metadata and cache as a whole run). worker: the second
    lane's process, started by the caller before its own imports (None: started here where a
    second core is), closed by this run. uncached: nodes executed even where cached.

    Raises:
      NodeFailed: a node failed (its error inside).
    """
    worker = worker if worker is not None else node_worker.Worker.if_useful()
    try:
        os.makedirs(config.paths.pipeline_root, exist_ok=True)
        os.makedirs(os.path.dirname(os.path.abspath(config.metadata_path)), exist_ok=True)
        pipeline = definition.create_pipeline(config, input_base, pattern, decisions,
                                                to_node=to_node)
        ir, run_id = compile_run(pipeline, uncached)
    except BaseException:
        if worker is not None:
            worker.close()
        raise
    schedule = _run(ir, worker)
    if schedule.error is not None:
        raise NodeFailed(schedule.failed_node, run_id, schedule.error) from schedule.error
    return metadata_store.report(config, run_id)


def _record_stopped(ir) -> None:
    """Every execution of the run that had not ended (the other lane's node, its process killed)
    recorded as failed in ML Metadata, as the interrupted node's own launcher records it."""
    from ml_metadata.proto import metadata_store_pb2

    connection = tfx_compat.metadata_connection(ir)
    run_id = ir.runtime_spec.pipeline_run_id.field_value.string_value
    unended = (metadata_store_pb2.Execution.NEW, metadata_store_pb2.Execution.RUNNING)
    with tfx_compat.metadata_class()(connection) as handle:
        context = handle.store.get_context_by_type_and_name(tfx_compat.run_context_type(), run_id)
        if context is None:
            return
        stopped = [e for e in handle.store.get_executions_by_context(context.id)
                   if e.last_known_state in unended]
        for execution in stopped:
            execution.last_known_state = metadata_store_pb2.Execution.FAILED
        if stopped:
            handle.store.put_executions(stopped)


class _Schedule:
    """Which node runs next, shared by the lanes."""

    def __init__(self, ir):
        nodes = [n.pipeline_node for n in ir.nodes
                 if not n.pipeline_node.execution_options.HasField("skip")]
        self.order = [n.node_info.id for n in nodes]
        self._upstream = {n.node_info.id: set(n.upstream_nodes) & set(self.order) for n in nodes}
        self._started: set[str] = set()
        self._running: set[str] = set()
        self._done: set[str] = set()
        self.error: BaseException | None = None
        self.failed_node = ""
        self.last_node = ""  # the node that finished last (a stop between nodes names it)
        self.over = False  # the run has ended: the worker is being stopped
        self.stopping = False  # SIGTERM arrived: no lane takes another node
        self.worker_lane_open = False  # the worker's lane may still finish a node
        self._changed = threading.Condition()

    def take(self, in_process: bool) -> str | None:
        """The first node not started whose upstream nodes have finished (one this lane may
        run), waiting for one; None once every node has started or one has failed. While the
        worker's lane is open, this process's lane takes a ready node only it may run first
        (the Trainer beside the gradient-boosting reference, which the compiled order puts
        first), leaving the others to the worker.

        Nothing that can wait is done while the schedule's lock is held (its record is logged
        after): SIGTERM's handler takes this lock (`stop`, `running`) in the main thread at
        whatever instant the signal meets, which may be inside a log handler. A lane that
        logged while holding it waited for that handler's lock, and the handler for this one:
        the run hung until it was killed (a fresh-clone CI, SIGTERM as StatisticsGen started
        and the worker's lane took Transform)."""
        with self._changed:
            while True:
                if (self.error is not None or self.stopping
                        or len(self._started) == len(self.order)):
                    return None
                ready = [node for node in self.order
                         if node not in self._started and self._upstream[node] <= self._done
                         and (in_process or node not in IN_PROCESS)]
                if in_process and self.worker_lane_open:
                    ready.sort(key=lambda node: node not in IN_PROCESS)  # stable: in order
                if ready:
                    node = ready[0]
                    self._started.add(node)
                    self._running.add(node)
                    break
                self._changed.wait()
        _log.info("Component %s is running.", node)
        return node

    def finished(self, node: str, cached: bool) -> None:
        _log.info("Component %s is finished.", node, extra={"cached": cached})
        with self._changed:
            self._running.discard(node)
            self._done.add(node)
            self.last_node = node
            self._changed.notify_all()

    def failed(self, node: str, error: BaseException) -> None:
        _log.error("Component %s failed: %s: %s", node, type(error).__name__, error)
        with self._changed:
            self._running.discard(node)
            if self.error is None:
                self.error, self.failed_node = error, node
            self._changed.notify_all()

    def stop(self) -> None:
        """SIGTERM arrived: neither lane takes another node (the worker's lane would go on while
        this process's lane ends the node its signal met)."""
        with self._changed:
            self.stopping = True
            self._changed.notify_all()

    def running(self) -> set[str]:
        with self._changed:
            return set(self._running)

    def lane_closed(self) -> None:
        """The worker's lane takes no more nodes (it ran out, failed or its process ended)."""
        with self._changed:
            self.worker_lane_open = False
            self._changed.notify_all()

    def wait_settled(self) -> None:
        """Returns once no node is running and every node has finished or one has failed, or
        the worker's lane has closed: woken by each change, no polling."""
        with self._changed:
            while self.worker_lane_open and (self._running or (
                    self.error is None and len(self._done) < len(self.order))):
                self._changed.wait()


def _worker_lane(schedule: _Schedule, worker: node_worker.Worker, ir) -> None:
    try:
        _take_nodes(schedule, worker, ir)
    finally:
        schedule.lane_closed()


def _take_nodes(schedule: _Schedule, worker: node_worker.Worker, ir) -> None:
    if not worker.wait_ready():
        if not schedule.over:
            _log.warning("the worker process ended before it was ready: this process runs "
                         "every node")
        return
    while (node := schedule.take(in_process=False)) is not None:
        try:
            outcome = worker.launch(ir, node)
        except node_worker.WorkerDied as err:
            if not (schedule.over or schedule.stopping):  # else the run killed it: no failure
                schedule.failed(node, err)
            return
        if outcome.error is not None:
            schedule.failed(node, outcome.error)
            return
        schedule.finished(node, outcome.cached)


def run_ir(ir, worker: node_worker.Worker | None) -> None:
    """Runs every node of `ir` (its run id set) in this process and, given one, in `worker`
    (which it closes). When a node fails, no node starts after it; the run waits for the node
    running in the other lane (its execution is recorded whole) and raises the first error."""
    schedule = _run(ir, worker)
    if schedule.error is not None:
        raise schedule.error


def _stopped_by_sigterm(schedule: "_Schedule", worker: node_worker.Worker | None):
    """While the run lasts, SIGTERM raises Stopped in this (the main) thread, naming what ran
    (runtime/termination.py); the Trainer's training swaps in its own handler, which
    saves a checkpoint first. Yields the check made at each hand-over.

    As the signal arrives, no lane takes another node and the worker is killed (from a thread of
    its own, not the handler): its node stops there, as this lane's does, and is recorded failed.
    A node that swallows the Stopped here (a library catching everything) would otherwise leave
    the worker's lane seconds to finish its node and start others, and the stopped run completed
    nodes the signal had met."""

    def stopped() -> str:
        schedule.stop()
        if worker is not None:
            threading.Thread(target=worker.kill, daemon=True, name="lockstep-worker-kill").start()
        running = ", ".join(sorted(schedule.running()))
        where = (f"while {running} ran" if running else
                 f"after {schedule.last_node} finished, before the next component started"
                 if schedule.last_node else "as the run started")
        return f"stopped by SIGTERM {where}; run again: the components that completed are reused"

    return termination.stop_on_sigterm(stopped)


def _run(ir, worker: node_worker.Worker | None) -> _Schedule:
    """run_ir's work; the schedule holds the first error and its node. Stopped: every execution
    that had not ended is recorded as failed."""
    try:
        return _run_lanes(ir, worker)
    except Stopped as err:
        _log.warning("%s", err)  # the run's log, with its time
        _record_stopped(ir)
        raise


def _run_lanes(ir, worker: node_worker.Worker | None) -> _Schedule:
    schedule = _Schedule(ir)
    try:
        with _stopped_by_sigterm(schedule, worker) as check:  # before either lane takes a node
            if worker is not None:
                schedule.worker_lane_open = True
                threading.Thread(target=_worker_lane, args=(schedule, worker, ir), daemon=True,
                                 name="lockstep-worker-lane").start()
            while (node := schedule.take(in_process=True)) is not None:
                if node == definition.TRAINER_NODE and definition.EVALUATOR_NODE in \
                        schedule.order:  # its TensorFlow imports beside the training, if it trains
                    serving_check.prewarm_when_training_begins()
                try:
                    cached = node_worker.launch(ir, node)
                except Stopped:
                    raise
                except Exception as err:  # noqa: BLE001  raised below, once the other lane is idle
                    check()  # a Stopped that the node's code wrapped in an error of its own
                    schedule.failed(node, err)
                    break
                check()  # a Stopped that the node's code swallowed: stop before the next
                schedule.finished(node, cached)
            schedule.wait_settled()
            check()
        return schedule
    finally:
        serving_check.discard_prewarmed()
        schedule.over = True
        if worker is not None:
            worker.close()
