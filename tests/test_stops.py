"""SIGTERM (a `kill`, a pod evicted) at any instant of a real `lockstep run`: the run stops within
seconds with one line naming what ran and status 5, nothing partial is served, and the next run
reuses what completed and pushes the model a clean run pushes. Kubernetes' eviction (SIGTERM, then
SIGKILL after the grace period) never leaves a partial version either.

The signal goes to the `lockstep run` process only, as Kubernetes sends it to a container's first
process; the instant is chosen from the run's log (`Component X is running.`) or at random.

The same chain of runs that stops each node fills the disk as each stage runs (a real tmpfs
mounted here, where the machine lets the test): both need a run for each node, each on the state
the one before left, so one chain serves both and its one completing run checks the model."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import forked_cli
from conftest import PipelineRun, lockstep_started

# The nodes of the bundled run, in the compiled order.
NODES = ("CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "Transform",
         "LatestPushedModel", "Trainer", "GradientBoosting", "Evaluator", "Pusher")
STOPPED_STATUS = 5
# The random instants fall within this many seconds of a run's first line: within a run of the
# bundled data on an idle machine (8 to 12 s fresh on today's machine; a fresh-clone
# CI's instants of 9.1 and 10.13 s, from 12, both met a run that had ended), longer under load.
SPAN_SECONDS = 6.0
# Within seconds: about 2 on an idle machine. A signal the main thread cannot take at once (inside
# TensorFlow's C++, as the Trainer starts beside GradientBoosting) comes again every 2 s; on this
# 2-core machine under a whole suite's load such stops took 6.0 and 6.6 s (a fresh-clone CI failed
# on 5.0). Kubernetes' grace period is 30 s.
WITHIN_SECONDS = 10.0
_STOPPED = re.compile(r"^lockstep: error: stopped by SIGTERM (while (?P<nodes>.+?) ran|after "
                      r"(?P<after>\S+) finished, before the next component started|while .+|as "
                      r"the run started)")


class Run:
    """A `lockstep run` in a process of its own, its stdout read as it comes: a fork of the tests'
    fork server (conftest's lockstep_started), or with `fresh` a fresh interpreter, whose
    imports a signal can meet too."""

    def __init__(self, run: PipelineRun, *extra: str, fresh: bool = False):
        self.process = lockstep_started(
            "run", "--pipeline-root", run.pipeline_root, "--serving-dir", run.serving_dir, *extra,
            cwd=run.root, env={"PYTHONUNBUFFERED": "1"}, fresh=fresh)
        self.run, self.started_at, self.log = run, time.time(), None

    def log_file(self, timeout: float = 120) -> Path:
        """The run's log file, from its first lines."""
        deadline = time.monotonic() + timeout
        while self.log is None and time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if found := re.search(r"library logs go to (\S+)", line):
                self.log = Path(found.group(1))
        assert self.log is not None, "no log file line"
        return self.log

    def wait_for_log(self, pattern: str, timeout: float = 300) -> bool:
        """Waits until the log has a line matching `pattern`; False if the run ended first. The
        log is read as it grows, each part once (a run's log is hundreds of kB)."""
        log, tail, handle = self.log_file(), "", None
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if handle is None and log.exists():
                    handle = open(log, errors="replace")  # noqa: SIM115  closed below
                if handle is not None and (new := handle.read()):
                    if re.search(pattern, tail + new, re.M):
                        return True
                    tail = (tail + new)[-200:]
                if self.process.poll() is not None:
                    return False
                time.sleep(0.02)
        finally:
            if handle is not None:
                handle.close()
        raise AssertionError(f"no {pattern!r} in {log} within {timeout} s")

    def stop(self, grace: float | None = None) -> tuple[int, float, str]:
        """SIGTERM; with `grace`, SIGKILL that many seconds later if it still runs (Kubernetes'
        eviction). (status, seconds to end, stderr's last line)."""
        tic, self.sent_at = time.monotonic(), time.time()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace if grace is not None else 120)
        except subprocess.TimeoutExpired:  # it hangs: where, on its stderr (tests/forked_cli.py)
            if isinstance(self.process, forked_cli.Child):
                self.process.send_signal(signal.SIGUSR1)
                time.sleep(2)
            self.process.kill()
            self.process.wait()
        seconds = time.monotonic() - tic
        out, self.err = self.process.communicate()
        lines = self.err.strip().splitlines()
        return self.process.returncode, seconds, lines[-1] if lines else ""

    def ended_before_the_signal(self) -> bool:
        """Whether the stopped run had written its page, the last of its work, before SIGTERM
        was sent: the signal met only its exit (the page is written while SIGTERM still stops the
        run: pipeline/use_cases/local_run.py), which it ends with status 0, or -SIGTERM as it
        prints its summary. A fresh-clone CI sent it there once: status 0."""
        pages = self.run.pipeline_root.glob("reports/*.html")
        return any(self.started_at < p.stat().st_mtime < self.sent_at for p in pages)


def _complete_versions(run: PipelineRun) -> list[Path]:
    """The numbered versions in the serving dir, each asserted whole (its push record, a model
    that parses): never a partial one."""
    from components import serving_versions

    versions = run.pushed_versions()
    for version in versions:
        assert serving_versions.is_complete(str(version)), f"partial version {version}"
    return versions


def _same_model_as(path: Path, clean: Path) -> None:
    import numpy as np
    import tensorflow as tf

    from conftest import eval_examples

    files = list(clean.parent.parent.glob("pipeline_root/CsvExampleGen/examples/*/Split-eval/*"))
    serialized, _ = eval_examples(files, "species")
    predict = lambda p: tf.saved_model.load(str(p)).signatures["serving_default"](  # noqa: E731
        examples=tf.constant(serialized))["probabilities"].numpy()
    np.testing.assert_allclose(predict(path), predict(clean), atol=1e-6)


# The chain of runs on one root: SIGTERM as each node starts ("stop"), and (where this machine
# lets the test mount a tmpfs of its own under the pipeline root and one under the serving dir)
# the disk that fills as each stage runs ("fill": its log line, or a progress line on stdout with
# "^"; the disk). Each run needs the one before it: a node stopped (or failed) in one run runs
# in the next. Each stop finds its node not completed and the nodes before it completed or
# about to run, as when the stops ran alone; each fill the state it found when the fills ran alone.
_CHAIN = (("stop", "CsvExampleGen"),
          ("fill", "CsvExampleGen", r"Component CsvExampleGen is running\.", "root"),
          ("stop", "StatisticsGen"), ("stop", "SchemaGen"), ("stop", "ExampleValidator"),
          ("stop", "Transform"),
          ("fill", "Transform", r"Component Transform is running\.", "root"),
          ("stop", "LatestPushedModel"), ("stop", "Trainer"), ("stop", "GradientBoosting"),
          ("fill", "Trainer", r"^  Trainer +step \d+/", "root"),
          # The Trainer runs again first: the gradient-boosting reference beside it has ended
          # when the Evaluator starts (with the Trainer cached, both would start together).
          ("fill", "Evaluator", r"Component Evaluator is running\.", "root"),
          ("stop", "Evaluator"),
          # The push is quick: its disk is filled as the Evaluator runs (then the Pusher's stop,
          # whose run finds the Evaluator cached).
          ("fill", "Pusher", r"Component Evaluator is running\.", "serving"),
          ("stop", "Pusher"))
assert [step[1] for step in _CHAIN if step[0] == "stop"] == list(NODES)
_FAILED = re.compile(r"lockstep: error: pipeline run failed in (\w+): out of disk space under "
                     r"the (pipeline root|serving dir) (\S+)[^;]*; free some space and run "
                     r"again: the components that completed are reused")
# The ExampleGen runs beside LatestPushedModel (which needs nothing before it), Transform beside
# the validation branch, and the gradient-boosting reference (which waits for the validator)
# beside the end of Transform and beside the Trainer: any of them can be the one the full disk
# fails (a fresh-clone CI on 47f92c8 saw GradientBoosting fail as Transform ran; a run forked
# from the tests' fork server, LatestPushedModel as the ExampleGen ran).
_BESIDE = {"CsvExampleGen": ("CsvExampleGen", "LatestPushedModel"),
           "Transform": ("Transform", "StatisticsGen", "SchemaGen", "ExampleValidator",
                         "GradientBoosting", "LatestPushedModel"),
           "Trainer": ("Trainer", "GradientBoosting")}


@pytest.mark.slow
def test_each_node_stopped_by_sigterm_or_a_full_disk_is_one_line_and_the_next_run_completes(
        tmp_path, penguins_run):
    """Run after run on one root, SIGTERM as the next node starts (each earlier one cached by
    then): every run ends within seconds, status 5, its last line naming that node; nothing is
    pushed (but by a Pusher that finished first, once).

    Between them, the disk under the pipeline root and the serving dir fills as the ExampleGen
    writes, as Transform does, as the Trainer trains (its next checkpoint), as the Evaluator and
    the Pusher start, and as the run's page is written: each time one line naming the node and
    the place, status 1, nothing pushed; space freed, the next run goes on.

    Then a run completes, reusing what completed, and the one version pushed is the model a clean
    run pushes (the shared run's, the same predictions). Where no tmpfs can be mounted here, the
    stops and the completing run alone, and the test says so (skipped, after passing them)."""
    run = PipelineRun(tmp_path)
    with _tmpfs(tmp_path, "size=140m") as disk, _tmpfs(tmp_path, "size=70m") as serving:
        if disk and serving:  # the serving dir needs 64 MB
            run.pipeline_root, run.serving_dir = disk / "root", serving / "serving"
        for step in _CHAIN:
            if step[0] == "stop":
                _stop_as_it_starts(run, step[1])
            elif disk and serving:
                node, when, full = step[1:]
                _fill_as_it_runs(run, node, when, disk if full == "root" else serving)
        if disk and serving:
            out = _page_on_a_full_disk(run, disk)
        else:
            result = run.run()
            assert result.returncode == 0, result.stderr[-2000:]
            out = result.stdout
        assert re.search(r"^  CsvExampleGen +cached", out, re.M), out
        [version] = _complete_versions(run)
        _same_model_as(version, penguins_run.pushed_versions()[0])
    if not (disk and serving):
        pytest.skip("cannot mount a tmpfs here: the disk fills were not tested (the stops "
                    "passed); they need a real file system of their own")


@contextlib.contextmanager
def _tmpfs(tmp_path, options: str):
    """A fresh tmpfs with those options, unmounted afterwards (lazily where a process of a failed
    test still holds a file there: after a hung run a plain unmount was refused, the tmpfs
    stayed, and pytest could not remove its directory in the next session); None where this
    machine does not let the test mount one."""
    point = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
    point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                             capture_output=True, text=True, check=False).returncode == 0
    try:
        yield point if mounted else None
    finally:
        if mounted and subprocess.run(["umount", str(point)], capture_output=True,
                                      check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", str(point)], capture_output=True, check=False)


def _stop_as_it_starts(run: PipelineRun, node: str) -> None:
    started = Run(run)
    assert started.wait_for_log(rf"Component {node} is running\."), \
        started.process.communicate()[1][-2000:]
    status, seconds, line = started.stop()
    assert status == STOPPED_STATUS and seconds < WITHIN_SECONDS, (
        node, status, seconds, started.err[-4000:], _tail(started.log))
    named = _STOPPED.match(line)
    assert named, (node, line)
    nodes = [n for n in (named.group("nodes") or "").split(", ") if n]
    if node not in nodes:
        # A node of milliseconds (SchemaGen, ExampleValidator: 0.05 s) can end between its
        # first log line and the signal (a fresh-clone CI saw SchemaGen done, the line naming
        # ExampleValidator and Transform): then it finished, and the line names what ran then.
        log = started.log.read_text(errors="replace")
        assert f"Component {node} is finished." in log, (node, line, _tail(started.log))
        assert named.group("after") or all(
            f"Component {n} is running." in log for n in nodes), (node, line, _tail(started.log))
    assert line.endswith("run again: the components that completed are reused"), line
    # Nothing is pushed, but by a Pusher whose (atomic) push completed before the signal
    # landed (a fresh-clone CI on a loaded machine saw it): then one whole version, which
    # the next run does not push again (a model is pushed once).
    pushed = _complete_versions(run)
    assert pushed == [] or (node == "Pusher" and len(pushed) == 1), (node, pushed)


def _tail(log: Path | None, lines: int = 15) -> str:
    """The last lines of a run's log (where a stop that did not end went), for a failed test."""
    if log is None or not log.exists():
        return f"no log at {log}"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _fill(disk) -> None:
    """Every byte left on the file system, taken by one file. Unbuffered: a buffered file kept
    the bytes of a write the full disk cut short, and raised ENOSPC again as it closed (a fresh-clone
    CI failed so; on a 3 MB tmpfs, once in five fills of different free space)."""
    try:
        filler = open(disk / "filler", "wb", buffering=0)
    except OSError as err:  # full before the fill: by what?
        used = sorted(((sum(f.stat().st_size for f in d.rglob("*") if f.is_file()), str(d))
                       for d in disk.glob("*/*")), reverse=True)[:8]
        raise AssertionError(f"{disk} full before the fill ({err}): {used}") from None
    with filler:
        try:
            while True:
                filler.write(b"\0" * (1 << 20))  # a short write when the disk fills, then ENOSPC
        except OSError:
            pass


def _fill_as_it_runs(run: PipelineRun, node: str, when: str, full: Path) -> None:
    started = Run(run)
    if when.startswith("^"):  # a progress line, on stdout
        started.log_file()
        assert any(re.match(when, line) for line in started.process.stdout)
    else:
        assert started.wait_for_log(when), started.process.communicate()[1][-2000:]
    _fill(full)
    out, err = started.process.communicate(timeout=300)
    assert started.process.returncode == 1, (node, out[-2000:], err[-2000:])
    line = err.strip().splitlines()[-1]
    said = _FAILED.match(line)
    failing = _BESIDE.get(node, (node,))
    if re.search(rf"^  {node} +cached", out, re.M):
        # The stop before this run met the node as it ended (its execution completed, and stands:
        # it is reused here), so the disk filled under a node after it. (Once, in a suite, the
        # Trainer failed on the fill "as Transform ran"; this is the likely cause, not a proven
        # one: that run's output was lost. The assertion below keeps the stdout and the log.)
        failing += NODES[NODES.index(node) + 1:]
    assert said and said.group(1) in failing, (node, line, out[-2000:], _tail(started.log, 60))
    assert said.group(3) == str(run.serving_dir if full == run.serving_dir.parent
                                else run.pipeline_root)
    assert _complete_versions(run) == []
    (full / "filler").unlink()


def _page_on_a_full_disk(run: PipelineRun, disk: Path) -> str:
    """A run whose disk fills after the push, as its page is written: it completes (status 0),
    saying the report could not be written. Its stdout."""
    started = Run(run)
    assert started.wait_for_log(r"Component Pusher is finished\.")
    _fill(disk)
    out, err = started.process.communicate(timeout=300)
    assert started.process.returncode == 0, err[-2000:]
    assert re.search(r"^lockstep: the run report could not be written: out of disk space under "
                     rf"the pipeline root {disk}/root[^;]*; free some space, then `lockstep "
                     r"report` writes it$", out, re.M), out
    (disk / "filler").unlink()
    return out


@pytest.mark.slow
def test_sigterm_at_random_instants_is_never_lost_and_an_eviction_leaves_no_partial_version(
        tmp_path):
    """SIGTERM at random instants of runs (LOCKSTEP_SIGTERM_INSTANTS of them; each run trains
    another number of steps, so the Trainer, the Evaluator and the Pusher run every time; a
    fresh root every fourth): a run the signal reached while it lasted ends within seconds with
    status 5 and a `stopped by SIGTERM` line, never status 0. Then Kubernetes' eviction: SIGTERM,
    SIGKILL after LOCKSTEP_GRACE_SECONDS. The serving dir never holds a partial version, and the
    next run (the evicted one's command again, so what it completed is reused) completes."""
    rng = random.Random(int(os.environ.get("LOCKSTEP_SIGTERM_SEED", "0")))
    instants = int(os.environ.get("LOCKSTEP_SIGTERM_INSTANTS", "1"))
    grace = float(os.environ.get("LOCKSTEP_GRACE_SECONDS", "3"))
    outcomes = []
    for i in range(instants + 1):
        run = PipelineRun(tmp_path / f"root-{i // 4}")
        run.root.mkdir(exist_ok=True)
        started = Run(run, "--train-steps", str(300 + i), fresh=True)  # its imports too
        started.log_file()
        delay = rng.uniform(0, SPAN_SECONDS)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and started.process.poll() is None:
            time.sleep(0.01)
        if started.process.poll() is not None:  # ended before the instant: nothing to stop
            outcomes.append((round(delay, 2), "ended first", started.process.returncode))
            started.process.communicate()
            continue
        evicting = i == instants
        status, seconds, line = started.stop(grace=grace if evicting else None)
        if status in (0, -signal.SIGTERM) and started.ended_before_the_signal():
            outcomes.append((round(delay, 2), "ended first", status))  # as it exited
            continue
        outcomes.append((round(delay, 2), status, round(seconds, 2), line[:90]))
        if evicting:
            assert status in (STOPPED_STATUS, -signal.SIGKILL), outcomes
        else:
            assert status == STOPPED_STATUS and "stopped by SIGTERM" in line, (
                outcomes, started.err[-3000:])
            assert seconds < WITHIN_SECONDS, outcomes
        _complete_versions(run)
    print("\n".join(map(str, outcomes)))
    # A signal that landed after every run had ended would prove nothing (instants up to 40 s
    # did that on an idle machine, where a run takes about 20).
    assert any(outcome[1] != "ended first" for outcome in outcomes), outcomes
    result = run.run("--train-steps", str(300 + instants))  # the evicted run again
    assert result.returncode == 0, result.stderr[-2000:]
    _complete_versions(run)
