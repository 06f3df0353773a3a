"""runtime/processes.py: a child Python process's environment imports what this one does;
a fork seen as a Popen; imports that pay no cycle collection."""

import os
import subprocess
import sys

from runtime import processes


def test_pythonpath_keeps_the_users_entries_first_then_the_paths_then_lockstep_once(
        monkeypatch, tmp_path):
    hooks = str(tmp_path / "hooks")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([hooks, "", processes.PACKAGE_ROOT]))
    env = processes.python_env(["/extra", hooks], TF_USE_LEGACY_KERAS="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [hooks, processes.PACKAGE_ROOT, "/extra"]
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env["HOME"] == os.environ["HOME"]
    monkeypatch.delenv("PYTHONPATH")
    assert processes.python_env()["PYTHONPATH"] == processes.PACKAGE_ROOT


def test_a_child_started_elsewhere_imports_lockstep_and_the_users_code(monkeypatch, tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "my_hooks.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "hooks"))
    out = subprocess.run(
        [sys.executable, "-c", "import my_hooks, runtime.processes; print(my_hooks.VALUE)"],
        env=processes.python_env(), cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "7"


def test_free_ports_are_distinct_and_can_be_bound():
    import socket

    ports = processes.free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_fork_is_seen_as_a_popen_its_pipes_status_and_end():
    """processes.Forked: the child reads stdin and answers on stdout (text), exits with what it
    returns (1, traceback on its stderr, when it raises); wait's timeout raises as Popen's does;
    kill ends it with -9."""
    import signal
    import time

    import pytest

    def echo(requests, answers):
        with os.fdopen(requests) as inp, os.fdopen(answers, "w") as out:
            out.write(inp.readline().upper())
        return 3

    child = processes.Forked(echo, text=True)
    child.stdin.write("hello\n")
    child.stdin.close()
    assert child.stdout.readline() == "HELLO\n"
    assert child.wait(timeout=30) == 3 and child.poll() == 3

    assert processes.Forked(lambda requests, answers: 1 / 0).wait(timeout=30) == 1

    sleeper = processes.Forked(lambda requests, answers: time.sleep(60) or 0)
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(timeout=0.2)
    sleeper.kill()
    assert sleeper.wait(timeout=30) == -signal.SIGKILL


def test_a_fresh_child_has_no_handler_of_its_parents_and_default_signals():
    """as_a_fresh_child in a fork: no logging handler the parent had (a run's console writes to
    the terminal), SIGTERM's default action, SIGINT raising KeyboardInterrupt."""
    import logging
    import signal

    def child(requests, answers):
        processes.as_a_fresh_child()
        handlers = [h for logger in [logging.getLogger(), logging.getLogger("lockstep.any")]
                    for h in logger.handlers]
        fresh = (not handlers and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
                 and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        return 0 if fresh else 2

    root, named = logging.getLogger(), logging.getLogger("lockstep.any")
    added = [logging.StreamHandler(), logging.StreamHandler()]
    root.addHandler(added[0]), named.addHandler(added[1])
    before = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        assert processes.Forked(child).wait(timeout=30) == 0
    finally:
        signal.signal(signal.SIGTERM, before)
        root.removeHandler(added[0]), named.removeHandler(added[1])


# A module of the shape of a large import: 100k lists the collector tracks (with untracked tuples
# and dicts of numbers), alive as long as the process; 300 cycles that are garbage at once (an
# import's leftovers).
_HEAVY_MODULE = """
KEPT = [[i, (i,), {"i": i}] for i in range(100_000)]
for _ in range(300):
    cycle = []
    cycle.append(cycle)
del cycle
"""

# Imports the module (plainly, or inside imports_uncollected), counting the full collections that
# run meanwhile, then prints what it saw as JSON.
_IMPORTER = """
import gc, json, sys
from runtime import processes
if sys.argv[2] == "off":
    gc.disable()
full = []
gc.callbacks.append(lambda phase, info: full.append(1)
                    if phase == "stop" and info["generation"] == 2 else None)
sys.path.insert(0, sys.argv[1])
if sys.argv[3] == "plain":
    import heavy
elif sys.argv[3] == "uncollected":
    with processes.imports_uncollected():
        import heavy
else:
    try:
        with processes.imports_uncollected():
            raise ImportError("no such module")
    except ImportError:
        pass
during = len(full)
print(json.dumps({"during": during, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                  "collected_after": gc.collect()}))
"""


def _imported(tmp_path, how: str, collector: str = "on") -> dict:
    (tmp_path / "heavy.py").write_text(_HEAVY_MODULE)
    out = subprocess.run([sys.executable, "-c", _IMPORTER, str(tmp_path), collector, how],
                         capture_output=True, text=True, check=True,
                         env=processes.python_env())
    import json

    return json.loads(out.stdout)


def test_imports_made_uncollected_pay_no_full_collection_and_are_frozen(tmp_path):
    """Plainly, the import pays full collections (the comparison that makes this test able to
    fail); inside imports_uncollected none, and what it made (100k tracked lists) is frozen: a
    later collection neither walks nor frees it. The collector is on again afterwards."""
    plain = _imported(tmp_path, "plain")
    assert plain["during"] >= 1 and plain["frozen"] == 0, plain
    uncollected = _imported(tmp_path, "uncollected")
    assert uncollected["during"] == 0, uncollected
    assert uncollected["enabled"] and uncollected["frozen"] > 100_000, uncollected
    # The import's garbage cycles were frozen with it: not collected later, as its objects are not.
    assert uncollected["collected_after"] < 300, uncollected


def test_a_collector_that_was_off_stays_off_and_a_failed_import_leaves_it_on(tmp_path):
    assert _imported(tmp_path, "uncollected", collector="off")["enabled"] is False
    failed = _imported(tmp_path, "failing")
    assert failed["enabled"] is True and failed["during"] == 0, failed


def test_a_lockstep_process_starts_one_openblas_thread_unless_told_otherwise(tmp_path):
    """runtime/__init__.py: numpy's OpenBLAS threads only spun in lockstep's processes
    (1.0 CPU-s a run); a count the environment names is kept."""
    script = ("import components, numpy, threadpoolctl; print(sorted(i['num_threads'] for i in "
              "threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'))")
    env = {k: v for k, v in processes.python_env().items() if k != "OPENBLAS_NUM_THREADS"}
    for named, threads in ((None, "[1]"), ("2", "[2]")):
        out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                             text=True, check=True, env=dict(env, **(
                                 {"OPENBLAS_NUM_THREADS": named} if named else {})))
        assert out.stdout.strip() == threads, out.stderr[-2000:]


# Loaded by the child through PYTHONPATH: at its exit, whether the collector is on and how many
# objects are frozen, and whether any full collection ran before the entry's main began.
_EXIT_PROBE = """
import atexit, gc, json, os, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1)
                    if phase == "stop" and info["generation"] == 2 else None)
def said():
    with open(os.environ["LOCKSTEP_PROBE_OUT"], "w") as out:
        json.dump({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                   "full": len(full), "tensorflow": "tensorflow" in sys.modules}, out)
atexit.register(said)
"""


def test_an_entry_started_with_python_m_imports_uncollected_then_collects():
    """`python -m trainer_module.parameter_server` (one of runtime.ENTRIES): its imports
    (TensorFlow's among them) pay no full collection and are frozen; by the time it runs, the
    collector is on. Imported any other way, the same module leaves the collector alone."""
    import json
    import tempfile

    def probe(*argv) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "sitecustomize.py"), "w") as hook:
                hook.write(_EXIT_PROBE)
            env = processes.python_env([tmp], LOCKSTEP_PROBE_OUT=os.path.join(tmp, "out.json"))
            env.pop("TF_CONFIG", None)  # the entry then stops at once, saying what it lacks
            env["PYTHONPATH"] = os.pathsep.join([tmp, env["PYTHONPATH"]])
            subprocess.run([sys.executable, *argv], env=env, capture_output=True, timeout=300)
            with open(os.path.join(tmp, "out.json")) as out:
                return json.load(out)

    entry = probe("-m", "trainer_module.parameter_server")
    assert entry["tensorflow"] and entry["enabled"] and entry["frozen"] > 100_000, entry
    assert entry["full"] == 0, entry
    imported = probe("-c", "import trainer_module.parameter_server")
    assert imported["tensorflow"] and imported["enabled"] and imported["frozen"] == 0, imported
    assert imported["full"] >= 1, imported


def test_every_entry_turns_the_collector_on_once_its_imports_are_made():
    """A process started as an entry imports with the collector off (runtime/__init__.py):
    each entry's `__main__` block must call processes.entry_imports_done() before its main, or
    the process would run without one."""
    import ast
    import importlib.util

    import runtime

    for entry in runtime.ENTRIES:
        tree = ast.parse(open(importlib.util.find_spec(entry).origin).read())
        [block] = [node for node in tree.body if isinstance(node, ast.If)
                   and ast.unparse(node.test) == "__name__ == '__main__'"]
        first = ast.unparse(block.body[0])
        assert first == "processes.entry_imports_done()", (entry, first)
