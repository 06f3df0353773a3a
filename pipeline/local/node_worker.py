"""Launching one node of a compiled pipeline (TFX's launcher, as LocalDagRunner does), in this
process or in a worker process of its own (pipeline/local/dag_runner.py runs two lanes).

The worker reads requests (the pipeline IR and a node id, pickled) and answers each with a pickled
reply. It is either

- this process forked (`Worker(fork=True)`), once its imports are done: the worker needs no
  start-up of its own (a `lockstep run` saves the 6 CPU-seconds a second interpreter spends
  importing TensorFlow and TFX). Only where no TensorFlow op has run in this process: its thread
  pools do not survive a fork (the caller knows: pipeline/orchestrators/local_dag.py forks a
  fresh `lockstep run` process right after it imports the runner, before any node runs); or
- `python -m pipeline.local.node_worker`, a fresh interpreter that imports TFX as it starts
  (beside whatever the parent is doing), requests on its stdin, answers on the stdout it had when
  it started.

Its own stdout and stderr both go to the parent's stderr, which during a run is the run's log file
(pipeline/local/console.py); it dies with its parent.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import pickle
import subprocess
import sys
import traceback
from dataclasses import dataclass

from runtime import processes

_READY = "ready"  # the worker's first answer: its imports are done


@dataclass
class Outcome:
    """What launching a node gave: `cached` (its outputs came from a cached execution), or the
    `error` it raised."""

    cached: bool = False
    error: BaseException | None = None


def launch(ir, node_id: str) -> bool:
    """Runs one node of `ir` (a pipeline_pb2.Pipeline whose run id is set) as TFX's LocalDagRunner
    does: driver, executor and publisher, against the IR's ML Metadata. True when TFX used a
    cached execution (its state in ML Metadata). Raises what the component raised.

    Each output of a node that ran gets its manifest (components/integrity.py) in ML Metadata;
    the outputs of a cached execution are checked against theirs before anything reads them.

    Raises:
      integrity.CorruptArtifact: a cached output is not what was written (the node runs again,
        not from the cache: pipeline/use_cases/local_run.py)."""
    from ml_metadata.proto import metadata_store_pb2

    from components.compat import tfx as tfx_compat

    connection = tfx_compat.metadata_connection(ir)
    info = tfx_compat.launch(ir, node_id, _in_turn(connection))
    if info is None or not info.execution_id:
        return False
    with _in_turn(connection) as handle:
        [execution] = handle.store.get_executions_by_id([info.execution_id])
        cached = execution.last_known_state == metadata_store_pb2.Execution.CACHED
        _manifests(handle.store, node_id, execution.id, check=cached)
    return cached


def _in_turn(connection):
    """TFX's ML Metadata connection (tfx.orchestration.metadata.Metadata) whose sessions (each
    outermost `with`: the launcher's driver and cache lookup, its publishing; never
    the executor) the two lanes take in turn, under an flock beside an SQLite store. Side by
    side, two processes writing to one SQLite file abort each other's transactions, and ML
    Metadata's client retries after a random wait of 2 s on average: with both lanes starting
    nodes together (a forked worker is ready at once), most runs waited so, some 8 s."""
    return _in_turn_class()(connection)


@functools.cache
def _in_turn_class():
    """The class, made once (TFX is imported where a node is launched, not with this module)."""
    from components.compat import tfx as tfx_compat

    class InTurn(tfx_compat.metadata_class()):
        def __init__(self, config):
            super().__init__(config)
            sqlite = config.sqlite if config.WhichOneof("config") == "sqlite" else None
            self._lock_path = f"{sqlite.filename_uri}.lanes" if sqlite else ""
            self._depth, self._lock_fd = 0, -1

        def __enter__(self):
            if self._depth == 0 and self._lock_path:
                self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(self._lock_fd)
                    raise
            self._depth += 1
            try:
                return super().__enter__()
            except BaseException:
                self._leave()
                raise

        def __exit__(self, *exc):
            try:
                return super().__exit__(*exc)
            finally:
                self._leave()

        def _leave(self):
            self._depth -= 1
            if self._depth == 0 and self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1

    return InTurn


def _manifests(store, node_id: str, execution_id: int, check: bool) -> None:
    """Records each output artifact's manifest, or (check) compares each with the one recorded."""
    from ml_metadata.proto import metadata_store_pb2

    from components import integrity

    events = [e for e in store.get_events_by_execution_ids([execution_id])
              if e.type == metadata_store_pb2.Event.OUTPUT]
    keys = {e.artifact_id: (e.path.steps[0].key if e.path.steps else "output") for e in events}
    artifacts = store.get_artifacts_by_id(list(keys))
    recorded = []
    for artifact in artifacts:
        if check:
            manifest = artifact.custom_properties.get(integrity.MANIFEST_KEY)
            found = manifest and integrity.changed(artifact.uri, manifest.string_value)
            if found:
                raise integrity.CorruptArtifact(node_id, keys[artifact.id], artifact.uri, *found)
        elif (manifest := integrity.manifest(artifact.uri)) is not None:
            artifact.custom_properties[integrity.MANIFEST_KEY].string_value = manifest
            recorded.append(artifact)
    if recorded:
        store.put_artifacts(recorded)


class WorkerDied(RuntimeError):
    """The worker process ended without answering."""


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _forked() -> processes.Forked:
    """This process forked into a worker, requests and answers through two pipes."""
    from components.compat import tfx as tfx_compat

    tfx_compat.import_launcher()  # what `launch` imports, once, before the fork

    parent = os.getpid()

    def child(requests: int, answers: int) -> int:
        _as_a_fresh_worker()
        logging.info("Node worker: process %d, forked from %d once its imports were done",
                     os.getpid(), parent)
        _serve(os.fdopen(requests, "rb"), os.fdopen(answers, "wb"))
        return 0

    return processes.Forked(child)


def _as_a_fresh_worker() -> None:
    """In a forked worker: what a fresh `python -m pipeline.local.node_worker` has. Its stdout
    and stderr to the parent's stderr (the run's log), signals as an interpreter starts them,
    and no handler of the parent's (its console's): log records to stderr, marked [worker]."""
    os.dup2(2, 1)
    processes.as_a_fresh_child()
    _log_to_stderr()


def _log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)s %(name)s [worker]: %(message)s")
    logging.getLogger("absl").setLevel(logging.INFO)


class Worker:
    """A worker process that launches nodes: this process forked once its imports are done
    (fork=True; see the module's doc for when), else a fresh interpreter (start it early: it
    imports TFX as it starts)."""

    def __init__(self, fork: bool = False):
        if fork and sys.platform == "linux":
            self._process = _forked()
        else:
            env = processes.python_env(sys.path)  # this process's import path (a test's dir too)
            self._process = subprocess.Popen(
                [sys.executable, "-m", "pipeline.local.node_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=None, env=env,
                preexec_fn=processes.die_with_parent)
        self._ready: bool | None = None
        self.pid = self._process.pid

    @classmethod
    def if_useful(cls, fork: bool = False) -> "Worker | None":
        """A worker where a second lane can run (more than one core), else None."""
        return cls(fork) if cores() > 1 else None

    def wait_ready(self) -> bool:
        """Waits for the worker to have imported TFX; False when it ended instead."""
        if self._ready is None:
            try:
                self._ready = pickle.load(self._process.stdout) == _READY
            except (EOFError, OSError, ValueError, pickle.UnpicklingError):
                self._ready = False
        return self._ready

    def launch(self, ir, node_id: str) -> Outcome:
        """Runs the node in the worker and waits for it; an error the component raised comes back
        as the Outcome's error (the same exception where it pickles)."""
        try:
            pickle.dump((ir.SerializeToString(), node_id), self._process.stdin)
            self._process.stdin.flush()
            cached, error = pickle.load(self._process.stdout)
            return Outcome(cached, error)
        except (EOFError, BrokenPipeError, pickle.UnpicklingError) as err:
            code = self._process.wait()
            raise WorkerDied(f"the worker process running {node_id} ended (exit status {code}) "
                             "without an answer; its log is the run's log file") from err

    def kill(self) -> None:
        """Kills the worker process now (SIGTERM arrived: the node it runs stops there); close
        still reaps it."""
        self._process.kill()

    def close(self) -> None:
        """Ends the worker, at once: between nodes it holds nothing; in one, the run has failed
        elsewhere (that node's execution stays unfinished in ML Metadata, as a killed run's)."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def _portable(err: BaseException) -> BaseException:
    """`err` if it pickles and unpickles as itself, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001  any exception's own pickling may fail
        return RuntimeError(f"{type(err).__name__}: {err}")


def main() -> None:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints of the libraries go to the log, not into the answers
    _log_to_stderr()
    with processes.imports_uncollected():  # trainer_module first: TF_USE_LEGACY_KERAS
        from components.compat import tfx as tfx_compat

        tfx_compat.import_launcher()  # before the first request

    _serve(sys.stdin.buffer, answers)


def _serve(requests, answers) -> None:
    """Says it is ready, then launches each node asked for, until the requests end."""
    from tfx.proto.orchestration import pipeline_pb2

    from components import memory

    pickle.dump(_READY, answers)
    answers.flush()
    while True:
        try:
            serialized, node_id = pickle.load(requests)
        except EOFError:
            return
        ir = pipeline_pb2.Pipeline.FromString(serialized)
        try:
            answer = (launch(ir, node_id), None)
        except Exception as err:  # noqa: BLE001  the parent raises it
            logging.error("%s failed:\n%s", node_id, traceback.format_exc())
            answer = (False, _portable(err))
        # It idles until the next node, maybe for the rest of the run: what the node freed goes
        # back to the system, not into malloc's arenas beside this process's TensorFlow.
        memory.release_free_memory()
        pickle.dump(answer, answers)  # plain values: this module is __main__ here
        answers.flush()


if __name__ == "__main__":
    main()
