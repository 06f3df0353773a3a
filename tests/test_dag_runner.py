"""The local runner's two lanes (pipeline/local/dag_runner.py, node_worker.py) on a real TFX
pipeline of python-function components (tests/dag_nodes.py), compiled and launched as a run is,
against a real ML Metadata: nodes whose inputs are ready run side by side in this process and the
worker; a node waits for every upstream node; an error in either lane stops the run with that
error; a second run is served from TFX's cache."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tfx.orchestration import metadata, pipeline as tfx_pipeline

from conftest import REPO
from dag_nodes import Consume, Produce, Step
from pipeline.local import dag_runner, node_worker

SECONDS = 2.0


def _pipeline(tmp_path, fail: str = "", trainer_last: bool = False, swallow: str = "",
              seconds: float = SECONDS):
    """A -> (B, C) -> D, each sleeping `seconds`; `fail`: the node that raises; `swallow`: the
    node that swallows the first exception raised in it."""
    record = str(tmp_path / "record.jsonl")

    def step(name, *upstream):
        node = Step(name=name, record=record, seconds=seconds, fail=int(name == fail),
                    swallow=int(name == swallow))
        node = node.with_id("Trainer" if trainer_last and name == "D" else name)
        for up in upstream:
            node.add_upstream_node(up)
        return node

    a = step("A")
    b, c = step("B", a), step("C", a)
    d = step("D", b, c)
    return tfx_pipeline.Pipeline(
        pipeline_name="lanes", pipeline_root=str(tmp_path / "root"), components=[a, b, c, d],
        enable_cache=True,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            str(tmp_path / "mlmd.sqlite")))


def _records(tmp_path) -> dict:
    path = tmp_path / "record.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return {r["node"]: r for r in map(json.loads, lines)}


def _ready_worker():
    worker = node_worker.Worker()
    assert worker.wait_ready()
    return worker


@pytest.mark.slow
def test_ready_nodes_run_side_by_side_and_a_second_run_is_cached(tmp_path, caplog):
    ir, _ = dag_runner.compile_run(_pipeline(tmp_path, trainer_last=True))
    worker = _ready_worker()
    dag_runner.run_ir(ir, worker)
    ran = _records(tmp_path)
    assert sorted(ran) == ["A", "B", "C", "D"]
    b, c = ran["B"], ran["C"]
    # B and C started together, one in each lane, and overlapped.
    assert {b["pid"], c["pid"]} == {os.getpid(), worker.pid}
    assert max(b["start"], c["start"]) < min(b["end"], c["end"]) - SECONDS / 2
    # A node waits for every upstream node.
    assert ran["A"]["end"] <= min(b["start"], c["start"])
    assert ran["D"]["start"] >= max(b["end"], c["end"])
    assert ran["D"]["pid"] == os.getpid()  # the Trainer's id: always this process
    assert worker._process.poll() is not None  # closed by the run

    caplog.set_level(logging.INFO, logger=dag_runner.__name__)
    ir, _ = dag_runner.compile_run(_pipeline(tmp_path, trainer_last=True))
    dag_runner.run_ir(ir, node_worker.Worker())
    assert len(_records(tmp_path)) == 4  # nothing ran again
    finished = [r for r in caplog.records if r.getMessage().endswith("is finished.")]
    assert len(finished) == 4 and all(r.cached for r in finished), finished


# A fresh process (no TensorFlow op has run in it) with a forked worker, as `lockstep run` has one
# (pipeline/orchestrators/local_dag.py): argv[1] the directory, argv[2] each node's seconds.
_FORKED = """
import json, os, sys, time
from pathlib import Path
from components import serving_check
from pipeline.local import dag_runner, node_worker
import test_dag_runner as t
tic = time.monotonic()
worker = node_worker.Worker(fork=True)
ready = worker.wait_ready()
serving_check.prewarm()
[(check, _)] = serving_check._prewarmed
print(json.dumps({"pid": os.getpid(), "worker": worker.pid, "ready": ready,
                  "seconds": time.monotonic() - tic, "check": check.pid}), flush=True)
ir, _ = dag_runner.compile_run(t._pipeline(Path(sys.argv[1]), trainer_last=True,
                                           seconds=float(sys.argv[2])))
dag_runner.run_ir(ir, worker)
"""


def _forked_run(tmp_path, seconds: float) -> tuple[subprocess.Popen, dict]:
    tmp_path.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    process = subprocess.Popen([sys.executable, "-c", _FORKED, str(tmp_path), str(seconds)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = process.stdout.readline()
    assert line, process.communicate()[1][-3000:]
    return process, json.loads(line)


@pytest.mark.slow
def test_a_forked_worker_is_ready_at_once_runs_the_other_lane_and_dies_with_its_parent(tmp_path):
    """The worker `lockstep run` forks once its imports are done needs no start-up (a spawned one
    imports TFX for seconds), runs the other lane's nodes beside this process's, and is killed
    by the kernel when its parent dies (SIGKILL: nothing of the parent's runs), as is the serving
    check's prewarmed process."""
    process, started = _forked_run(tmp_path / "lanes", SECONDS)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    assert started["ready"] and started["seconds"] < 2.0, started
    ran = _records(tmp_path / "lanes")
    b, c = ran["B"], ran["C"]
    assert {b["pid"], c["pid"]} == {started["pid"], started["worker"]}
    assert max(b["start"], c["start"]) < min(b["end"], c["end"]) - SECONDS / 2
    assert ran["D"]["pid"] == started["pid"]

    process, started = _forked_run(tmp_path / "killed", 60.0)
    os.kill(started["pid"], signal.SIGKILL)
    process.wait(timeout=60)
    deadline = time.monotonic() + 10
    for child in ("worker", "check"):
        while _alive(started[child]):
            assert time.monotonic() < deadline, f"the {child} process outlived its parent"
            time.sleep(0.1)


@pytest.mark.slow
def test_the_lanes_take_ml_metadata_sessions_in_turn(tmp_path):
    """Each lane's ML Metadata sessions (the launcher's, never its executor) under one flock
    beside the SQLite file: another process waits for its turn (rather than aborting the other's
    transaction, which ML Metadata's client retries after 2 s on average); nested sessions are
    one turn."""
    import select

    config = metadata.sqlite_metadata_connection_config(str(tmp_path / "mlmd.sqlite"))
    script = ("import sys; from tfx.orchestration import metadata; "
              "from pipeline.local import node_worker; "
              "config = metadata.sqlite_metadata_connection_config(sys.argv[1]); "
              "print('ready', flush=True); "
              "session = node_worker._in_turn(config); "
              "session.__enter__(); print('entered', flush=True); session.__exit__(None, None, None)")
    turn = node_worker._in_turn(config)
    with turn:
        with turn as handle:  # nested: the same turn
            handle.store.get_executions()
        other = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "mlmd.sqlite")],
                                 stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert other.stdout.readline() == "ready\n"
        assert not select.select([other.stdout], [], [], 1.5)[0], "it did not wait for its turn"
        assert (tmp_path / "mlmd.sqlite.lanes").exists()
    assert select.select([other.stdout], [], [], 30)[0] and other.stdout.readline() == "entered\n"
    assert other.wait(timeout=30) == 0


def _alive(pid: int) -> bool:
    """Running, not ended (a zombie that nobody reaped here counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("fail", ["B", "C"])
def test_an_error_in_either_lane_stops_the_run_with_that_error(tmp_path, fail):
    # No overlap measured here: a second a node (the other lane's node is taken as the failing
    # one is, and the run waits for it).
    ir, _ = dag_runner.compile_run(_pipeline(tmp_path, fail=fail, seconds=1.0))
    worker = _ready_worker()
    with pytest.raises(ValueError, match=f"^{fail} failed as told$"):
        dag_runner.run_ir(ir, worker)
    ran = _records(tmp_path)
    # The other lane's node ran to its end; nothing after the failed node started.
    assert sorted(ran) == sorted({"A", "B", "C"} - {fail})
    assert worker._process.poll() is not None


@pytest.mark.slow
def test_one_lane_runs_every_node_in_this_process(tmp_path):
    ir, _ = dag_runner.compile_run(_pipeline(tmp_path, seconds=0.5))  # an order, not an overlap
    dag_runner.run_ir(ir, None)
    ran = _records(tmp_path)
    assert sorted(ran) == ["A", "B", "C", "D"]
    assert {r["pid"] for r in ran.values()} == {os.getpid()}
    assert ran["B"]["end"] <= ran["C"]["start"]  # one after the other


def test_sigterm_stops_the_run_naming_the_node_and_records_it_failed(tmp_path):
    """SIGTERM outside training (a `kill`, an eviction) stops the run in the node it interrupts:
    Stopped names it, its execution is recorded as failed (the next run runs it again), nothing
    after it starts, and the process keeps the SIGTERM handler it had."""
    from ml_metadata.proto import metadata_store_pb2

    ir, _ = dag_runner.compile_run(_pipeline(tmp_path))
    before = signal.getsignal(signal.SIGTERM)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(dag_runner.Stopped, match=r"^stopped by SIGTERM while A ran; run again: "
                                                 r"the components that completed are reused$"):
        dag_runner.run_ir(ir, None)
    assert signal.getsignal(signal.SIGTERM) is before
    assert _records(tmp_path) == {}
    with metadata.Metadata(metadata.sqlite_metadata_connection_config(
            str(tmp_path / "mlmd.sqlite"))) as store:
        states = [e.last_known_state for e in store.store.get_executions()]
    assert states == [metadata_store_pb2.Execution.FAILED]


def test_a_stop_that_a_node_swallows_still_stops_the_run_at_the_hand_over(tmp_path):
    """Code that catches every exception (AutoGraph's fallback, a finalizer) swallows the Stopped
    that SIGTERM raised in node A: A runs to its end, and the run stops before B or C starts,
    naming A."""
    ir, _ = dag_runner.compile_run(_pipeline(tmp_path, swallow="A", seconds=1.0))
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(dag_runner.Stopped, match=r"^stopped by SIGTERM while A ran; "):
        dag_runner.run_ir(ir, None)
    assert sorted(_records(tmp_path)) == ["A"]  # A ended; nothing after it started


def test_a_stop_swallowed_inside_a_long_node_comes_again_until_the_run_stops(tmp_path):
    """A node of 30 s swallows the first Stopped and sleeps on: the signal comes again within
    REDELIVER_SECONDS and stops it there; its execution is recorded as failed."""
    import time

    from ml_metadata.proto import metadata_store_pb2

    from runtime import termination

    ir, _ = dag_runner.compile_run(_pipeline(tmp_path, swallow="A", seconds=30.0))
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    tic = time.monotonic()
    with pytest.raises(dag_runner.Stopped, match=r"^stopped by SIGTERM while A ran; "):
        dag_runner.run_ir(ir, None)
    assert time.monotonic() - tic < 0.3 + termination.REDELIVER_SECONDS + 3.0  # not 30 s
    assert _records(tmp_path) == {}
    with metadata.Metadata(metadata.sqlite_metadata_connection_config(
            str(tmp_path / "mlmd.sqlite"))) as store:
        states = [e.last_known_state for e in store.store.get_executions()]
    assert states == [metadata_store_pb2.Execution.FAILED]


@contextlib.contextmanager
def _sigterm_once_running(nodes: set[str], delay: float):
    """SIGTERM to this process `delay` seconds after every one of `nodes` has started (the
    runner's "Component X is running." records)."""

    class WhenAllRun(logging.Handler):
        running: set = set()

        def emit(self, record):
            node = record.getMessage().removeprefix("Component ").removesuffix(" is running.")
            self.running.add(node)
            if node in nodes and nodes <= self.running:
                threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()

    watcher = WhenAllRun()
    logger = logging.getLogger(dag_runner.__name__)
    logger.addHandler(watcher)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(watcher)
        logger.setLevel(level)


@contextlib.contextmanager
def _sigterm_once_started(record: str, nodes: set[str], delay: float):
    """SIGTERM to this process `delay` seconds after every one of `nodes` has entered its own
    code (tests/dag_nodes.py's Step writes its name to `record`.started there)."""
    done = threading.Event()

    def watch():
        started = Path(record + ".started")
        while not done.wait(0.01):
            names = set(started.read_text().split()) if started.exists() else set()
            if nodes <= names:
                if not done.wait(delay):  # not once the run has ended
                    os.kill(os.getpid(), signal.SIGTERM)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


@pytest.mark.slow
def test_sigterm_while_the_worker_runs_a_node_names_it_and_records_it_failed(tmp_path):
    """SIGTERM while B runs in the worker's lane and C in this process: both are named, and both
    executions are recorded as failed (the worker's, its process killed, by this process)."""
    from ml_metadata.proto import metadata_store_pb2

    ir, _ = dag_runner.compile_run(_pipeline(tmp_path))
    worker = _ready_worker()
    # SIGTERM half a node's time after B and C start.
    with _sigterm_once_running({"B", "C"}, SECONDS / 4), pytest.raises(
            dag_runner.Stopped, match=r"^stopped by SIGTERM while B, C ran; run again: the "
                                      r"components that completed are reused$"):
        dag_runner.run_ir(ir, worker)
    assert sorted(_records(tmp_path)) == ["A"]
    with metadata.Metadata(metadata.sqlite_metadata_connection_config(
            str(tmp_path / "mlmd.sqlite"))) as store:
        states = sorted(e.last_known_state for e in store.store.get_executions())
    # A's complete; B's and C's failed, none left running (one may not have been registered
    # yet when the signal came).
    complete, failed = metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.FAILED
    assert states[0] == complete and set(states[1:]) == {failed}, states


@pytest.mark.slow
def test_once_sigterm_arrives_the_workers_node_stops_and_no_lane_starts_another(tmp_path):
    """SIGTERM while this process's lane runs a node that swallows the Stopped (it runs on to its
    end, as a library that catches everything lets it) and the worker's runs C: the worker is
    killed there (C never ends), its lane starts nothing more (not E, which waits for C alone),
    and the run stops at the hand-over naming both. Before, the worker's lane went on finishing
    C and taking nodes until this lane's node ended: a stopped run completed nodes the signal had
    met or never met (a fresh-clone CI's chain of stops found Transform cached)."""
    record = str(tmp_path / "record.jsonl")
    a = Step(name="A", record=record, seconds=0.1).with_id("A")
    held = Step(name="Trainer", record=record, seconds=1.5, swallow=1).with_id("Trainer")
    c = Step(name="C", record=record, seconds=0.3).with_id("C")
    e = Step(name="E", record=record, seconds=0.1).with_id("E")
    held.add_upstream_node(a), c.add_upstream_node(a), e.add_upstream_node(c)
    pipeline = tfx_pipeline.Pipeline(
        pipeline_name="stopping", pipeline_root=str(tmp_path / "root"),
        components=[a, held, c, e], enable_cache=True,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            str(tmp_path / "mlmd.sqlite")))

    ir, _ = dag_runner.compile_run(pipeline)
    worker = _ready_worker()
    # Signalled once both nodes' own code runs: "Component Trainer is running." comes before the
    # launcher enters the Trainer's code, and a Stopped raised there is not swallowed (a CI found
    # the Trainer failed, not run on, when the launcher took more than 0.1 s on a busy machine).
    with _sigterm_once_started(record, {"Trainer", "C"}, 0.1), pytest.raises(
            dag_runner.Stopped, match=r"^stopped by SIGTERM while C, Trainer ran"):
        dag_runner.run_ir(ir, worker)
    # The Trainer swallowed the Stopped and ran on; C, in the killed worker, never ended.
    assert sorted(_records(tmp_path)) == ["A", "Trainer"]


def _produce_consume(tmp_path):
    produce = Produce(text="feature { name: 'x' }").with_id("SchemaGen")
    consume = Consume(schema=produce.outputs["out"], record=str(tmp_path / "read.txt"))
    return tfx_pipeline.Pipeline(
        pipeline_name="manifests", pipeline_root=str(tmp_path / "root"),
        components=[produce, consume], enable_cache=True,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            str(tmp_path / "mlmd.sqlite")))


@pytest.mark.parametrize("damaged", ["schema.pbtxt", "Split-train/FeatureStats.pb"])
def test_a_cached_output_not_what_its_node_wrote_is_named_before_it_is_read(tmp_path, damaged):
    """Each output of a node that ran gets its files' manifest in ML Metadata; a later run that
    would reuse it from the cache checks it first: a file with other bytes (or another size, or
    gone) stops the run naming the node, the output and the file, before its consumer reads it;
    run again without that node's cache, the run completes on a new output."""
    from components import integrity

    ir, _ = dag_runner.compile_run(_produce_consume(tmp_path))
    dag_runner.run_ir(ir, None)
    [path] = (tmp_path / "root").glob(f"SchemaGen/out/*/{damaged}")
    content = bytearray(path.read_bytes())
    content[:4] = b"XXXX"
    path.write_bytes(bytes(content))
    ir, _ = dag_runner.compile_run(_produce_consume(tmp_path))
    with pytest.raises(integrity.CorruptArtifact) as raised:
        dag_runner.run_ir(ir, None)
    assert (raised.value.node, raised.value.output, raised.value.path) == (
        "SchemaGen", "out", str(path))
    assert str(raised.value).endswith(
        f"{path} has other bytes than were written (its CRC-32 differs)")
    assert (tmp_path / "read.txt").read_text().count("\n") == 1  # read once, by the first run
    path.write_bytes(path.read_bytes()[:-1])
    ir, _ = dag_runner.compile_run(_produce_consume(tmp_path))
    with pytest.raises(integrity.CorruptArtifact, match=r"bytes, was written with \d+$"):
        dag_runner.run_ir(ir, None)
    ir, _ = dag_runner.compile_run(_produce_consume(tmp_path), uncached=("SchemaGen",))
    dag_runner.run_ir(ir, None)
    assert (tmp_path / "read.txt").read_text() == "feature { name: 'x' }\n" * 2
    ir, _ = dag_runner.compile_run(_produce_consume(tmp_path))
    dag_runner.run_ir(ir, None)  # the new output, cached and whole


def test_this_process_takes_the_node_only_it_runs_first_while_the_worker_can_take_the_other():
    """The compiled order puts GradientBoosting before the Trainer (both wait for the same
    nodes): this process's lane takes the Trainer, the worker's the reference; with no worker,
    the compiled order."""
    from tfx.proto.orchestration import pipeline_pb2

    ir = pipeline_pb2.Pipeline()
    for name, upstream in (("Transform", ()), ("GradientBoosting", ("Transform",)),
                           ("Trainer", ("Transform",)), ("Evaluator", ("Trainer",))):
        node = ir.nodes.add().pipeline_node
        node.node_info.id = name
        node.upstream_nodes.extend(upstream)

    def schedule(worker: bool):
        found = dag_runner._Schedule(ir)
        found.worker_lane_open = worker
        assert found.take(in_process=True) == "Transform"
        found.finished("Transform", cached=False)
        return found

    both = schedule(worker=True)
    assert both.take(in_process=True) == "Trainer"
    assert both.take(in_process=False) == "GradientBoosting"
    alone = schedule(worker=False)
    assert [alone.take(in_process=True), alone.take(in_process=True)] == [
        "GradientBoosting", "Trainer"]


def test_sigterm_met_inside_a_log_handler_while_a_lane_takes_a_node_stops_at_once():
    """SIGTERM's handler runs in the main thread wherever the signal meets it, here inside a log
    handler (the console's, which holds its lock while it emits), and takes the schedule's lock
    (`stop`, `running`) while the worker's lane takes a node and logs it: the lane must not hold
    the schedule's lock while it waits for the handler's. It did once, and the run hung until
    it was killed (a fresh-clone CI's tests/test_stops.py, SIGTERM as StatisticsGen started)."""
    from tfx.proto.orchestration import pipeline_pb2

    ir = pipeline_pb2.Pipeline()
    ir.nodes.add().pipeline_node.node_info.id = "CsvExampleGen"
    schedule = dag_runner._Schedule(ir)
    lane_waits = threading.Event()  # the lane has its node and waits for the handler's lock
    stopped, taken = threading.Event(), []

    class Console(logging.Handler):
        def acquire(self):
            if threading.current_thread() is lane:
                lane_waits.set()
            super().acquire()

        def emit(self, record):
            pass

    def signal_met_inside_the_handler():
        console.acquire()  # the main thread, inside the console's emit as the signal meets it
        try:
            lane.start()
            lane_waits.wait(10)
            # What SIGTERM's handler does first (_stopped_by_sigterm: `stop`, `running`), once
            # the schedule's lock can be had: a lane holding it fails the test, not hangs it.
            if schedule._changed.acquire(timeout=10):
                schedule._changed.release()
                schedule.stop()
                schedule.running()
                stopped.set()
        finally:
            console.release()  # the lane's record goes on

    console = Console()
    lane = threading.Thread(target=lambda: taken.append(schedule.take(in_process=False)),
                            daemon=True)
    main = threading.Thread(target=signal_met_inside_the_handler, daemon=True)
    level = dag_runner._log.level
    dag_runner._log.addHandler(console)
    dag_runner._log.setLevel(logging.INFO)
    try:
        main.start()
        main.join(10)
        assert lane_waits.is_set(), "the lane never logged the node it took"
        assert stopped.is_set(), "SIGTERM's handler waited for the lane, the lane for the log handler"
        lane.join(10)
        assert taken == ["CsvExampleGen"] and schedule.take(in_process=True) is None
    finally:
        dag_runner._log.removeHandler(console)
        dag_runner._log.setLevel(level)
