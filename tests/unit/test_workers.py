"""How `make test` spreads the suite over workers (tests/conftest.py with pytest-xdist): a test
file goes to one worker whole, but for the files in APART, spread test by test; the longest work
first (tests/test_seconds.json); a real run several files share (`shared`) made once for all
workers. Shown on a copy of the real conftest in a fresh `pytest -n 2`, with a stand-in
`tensorflow` (conftest emulates replicas before a module outside tests/unit is imported)."""

import json
import shutil
import subprocess
import sys
import threading

from conftest import APART, REPO, scope, shared

STANDIN = """
class config:
    list_physical_devices = staticmethod(lambda kind: ["cpu"])
    get_logical_device_configuration = staticmethod(lambda device: [None] * 8)
"""
# Each planted test writes which worker ran it; the session fixture counts how often it is made.
RECORD = """
import os, pathlib, subprocess, sys, time

import pytest

from conftest import shared


@pytest.fixture(scope="session")
def made(tmp_path_factory):
    def make(root):
        with open(os.environ["COUNT"], "a") as count:
            count.write("made\\n")
        time.sleep(1)
        return subprocess.CompletedProcess(["make"], 0, str(root), "")
    return shared(tmp_path_factory, "made", make)


def record(name, made):
    root, result = made
    assert result.stdout == str(root) and root.is_dir()
    with open(os.environ["RAN"], "a") as ran:
        ran.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(0.5)
"""


def test_a_file_goes_whole_but_apart_files_test_by_test():
    assert "tests/test_stops.py" in APART and "tests/test_kfp_local.py" not in APART
    assert scope("tests/test_stops.py::test_x") == "tests/test_stops.py::test_x"
    assert scope("tests/test_kfp_local.py::test_x[2]") == "tests/test_kfp_local.py"


def test_two_workers_share_one_real_run_and_spread_the_longest_first(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", tests / "conftest.py")
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "tensorflow.py").write_text(STANDIN)
    (tests / "record.py").write_text(RECORD)
    body = "from record import made, record\n\n"
    (tests / "test_stops.py").write_text(body + "".join(
        f"\ndef test_stop_{i}(made):\n    record('stop_{i}', made)\n" for i in range(2)))
    (tests / "test_short.py").write_text(body + "".join(
        f"\ndef test_short_{i}(made):\n    record('short_{i}', made)\n" for i in range(3)))
    # The stops' tests listed longest: each goes first, to a worker of its own; the short file
    # after them, whole, to one worker. (In the order collected, or the stops as one file, both
    # stops' tests would run on one worker.)
    (tests / "test_seconds.json").write_text(json.dumps(
        {**{f"tests/test_short.py::test_short_{i}": 1.0 for i in range(3)},
         **{f"tests/test_stops.py::test_stop_{i}": 100.0 for i in range(2)}}))
    ran, count = tmp_path / "ran.txt", tmp_path / "count.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
         "loadscope", "tests"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(tmp_path / "standin"), "PATH": "/usr/bin:/bin", "RAN": str(ran),
             "COUNT": str(count)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    workers = dict(line.split() for line in ran.read_text().splitlines())
    assert len(workers) == 5, workers
    assert count.read_text() == "made\n"  # once, for both workers
    assert len({workers[f"short_{i}"] for i in range(3)}) == 1  # a file, whole
    assert workers["stop_0"] != workers["stop_1"]  # apart, and first
    assert len(set(workers.values())) == 2


def test_shared_makes_once_for_concurrent_workers(tmp_path, monkeypatch):
    """Two workers asking at once (threads here: each takes the lock on a file of its own
    opening, as two processes do): one makes, the other waits and reads the same result."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    calls, results = [], []

    class Factory:  # pytest's tmp_path_factory, as a worker has it: its base under a common one
        def getbasetemp(self):
            return tmp_path / "popen-gw0"

    def make(root):
        import time

        calls.append(root)
        time.sleep(0.5)
        (root / "model").write_text("weights")
        return subprocess.CompletedProcess(["run"], 0, "Total: 1s", "")

    threads = [threading.Thread(target=lambda: results.append(shared(Factory(), "run", make)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [tmp_path / "run"]
    assert [(root, r.returncode, r.stdout) for root, r in results] == [
        (tmp_path / "run", 0, "Total: 1s")] * 2
    assert (tmp_path / "run" / "model").read_text() == "weights"


def test_the_seconds_file_is_written_from_junit(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("test_seconds", REPO / "tools" / "test_seconds.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    junit = tmp_path / "run.xml"
    junit.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_stops" name="test_a" time="12.5"/>'
        '<testcase classname="tests.unit.test_plan" name="test_b[2]" time="0.25"/>'
        '<testcase classname="tests.test_hooks.TestThem" name="test_c" time="1"/>'
        '</testsuite></testsuites>')
    assert tool.seconds_by_test(str(junit)) == {
        "tests/test_hooks.py::TestThem::test_c": 1.0, "tests/test_stops.py::test_a": 12.5,
        "tests/unit/test_plan.py::test_b[2]": 0.25}
