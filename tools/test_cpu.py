"""Where a test suite's CPU goes, test by test: a pytest plugin, and the report of what it wrote.

    PYTHONPATH=tools uv run --frozen pytest -p test_cpu -n 2 --dist loadscope tests
    python3 tools/test_cpu.py [DIR]

The plugin writes one JSON line per test to DIR/rows.<pid>.jsonl (DIR: $LOCKSTEP_TEST_CPU_DIR, else
/tmp/lockstep-test-cpu; each pytest-xdist worker writes its own file). A test's CPU is whichever
process spent it: the test process's own; the children it reaped during the test (a `lockstep run`,
a benchmark's smoke: RUSAGE_CHILDREN, their reaped descendants included); and the growth of the CPU
of its live descendants, read from /proc (a fork server and the runs it forked, a kept worker,
with the children they reaped). Time spent in a session fixture counts in the first test that
asks for it, as in pytest's own durations. Processes that are no descendant of the test process
are not counted: podman's containers (its conmon is re-parented), a daemon.

The report prints the CPU-seconds of the suite, by file and the tests that took the most, and what
share of the whole the largest tests take. Start the suite through `uv run` (or with the project's
environment's bin/ first on PATH): tests that start `python` by name otherwise get another one.
Linux only (/proc)."""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

try:
    from pytest import hookimpl
except ImportError:  # the report alone, under a Python without pytest
    def hookimpl(**_):
        return lambda function: function

DIR_VARIABLE = "LOCKSTEP_TEST_CPU_DIR"
DEFAULT_DIR = "/tmp/lockstep-test-cpu"
_TICKS = os.sysconf("SC_CLK_TCK")


def _rusage(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def descendants_cpu(root: int) -> float:
    """CPU-seconds of the live descendants of `root`, each with the children it reaped (utime,
    stime, cutime and cstime in /proc/PID/stat)."""
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:  # it ended while being read
                continue
            parent[int(entry)] = int(fields[1])
            cpu[int(entry)] = sum(int(f) for f in fields[11:15]) / _TICKS
    tree, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - tree
        tree |= frontier
    return sum(cpu[pid] for pid in tree)


def _now() -> dict[str, float]:
    return {"wall": time.perf_counter(), "self": _rusage(resource.RUSAGE_SELF),
            "children": _rusage(resource.RUSAGE_CHILDREN), "live": descendants_cpu(os.getpid())}


@hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _now()
    yield
    after = _now()
    row = {"test": item.nodeid, **{key: after[key] - before[key] for key in before}}
    row["cpu"] = row["self"] + row["children"] + max(row["live"], 0.0)
    directory = Path(os.environ.get(DIR_VARIABLE, DEFAULT_DIR))
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"rows.{os.getpid()}.jsonl", "a") as rows:
        rows.write(json.dumps(row) + "\n")


def report(directory: Path, largest: int = 25) -> str:
    rows = [json.loads(line) for path in sorted(directory.glob("rows.*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return f"no rows under {directory} (run the suite with -p test_cpu first)"
    total = sum(row["cpu"] for row in rows)
    files = collections.defaultdict(collections.Counter)
    for row in rows:
        counter = files[row["test"].split("::")[0]]
        counter["n"] += 1
        for key in ("wall", "cpu", "self", "children", "live"):
            counter[key] += row[key]
    walls = sum(row["wall"] for row in rows)
    lines = [f"{len(rows)} tests, {total:.0f} CPU-s, {walls:.0f} test-seconds",
             "", f"{'file':48} {'tests':>5} {'CPU-s':>7} {'share':>6} {'wall':>7}"]
    for name, c in sorted(files.items(), key=lambda item: -item[1]["cpu"]):
        lines.append(f"{name:48} {c['n']:5d} {c['cpu']:7.0f} {c['cpu'] / total:6.1%} "
                     f"{c['wall']:7.0f}")
    ranked = sorted(rows, key=lambda row: -row["cpu"])
    top = sum(row["cpu"] for row in ranked[:10])
    lines += ["", f"the {largest} largest tests (the ten largest: {top:.0f} CPU-s, "
              f"{top / total:.0%}):", f"{'CPU-s':>7} {'wall':>6} {'own':>6} {'reaped':>6} "
              f"{'live':>6}  test"]
    for row in ranked[:largest]:
        lines.append(f"{row['cpu']:7.1f} {row['wall']:6.1f} {row['self']:6.1f} "
                     f"{row['children']:6.1f} {row['live']:6.1f}  {row['test']}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 2 or sys.argv[1:] in (["-h"], ["--help"]):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    print(report(Path(sys.argv[1] if len(sys.argv) > 1
                      else os.environ.get(DIR_VARIABLE, DEFAULT_DIR))))
