"""SIGTERM (a `kill`, a pod evicted) at any instant of a real `lockstep run`: the run stops within
seconds with one line naming what ran and status 5, nothing partial is served, and the next run
reuses what completed and pushes the model a clean run pushes. Kubernetes' eviction (SIGTERM, then
SIGKILL after the grace period) never leaves a partial version either.

The signal goes to the `lockstep run` process only, as Kubernetes sends it to a container's first
process; the instant is chosen from the run's log (`Component X is running.`) or at random."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LOCKSTEP, REPO, PipelineRun

# The nodes of the bundled run, in the compiled order.
NODES = ("CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "Transform",
         "LatestPushedModel", "Trainer", "GradientBoosting", "Evaluator", "Pusher")
STOPPED_STATUS = 5
WITHIN_SECONDS = 5.0
_STOPPED = re.compile(r"^lockstep: error: stopped by SIGTERM (while (?P<nodes>.+?) ran|after "
                      r"(?P<after>\S+) finished, before the next component started|while .+|as "
                      r"the run started)")


class Run:
    """A `lockstep run` in a process of its own, its stdout read as it comes."""

    def __init__(self, run: PipelineRun, *extra: str):
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            LOCKSTEP + ["run", "--pipeline-root", str(run.pipeline_root), "--serving-dir",
                        str(run.serving_dir), *extra],
            cwd=run.root, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.log: Path | None = None

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
        """Waits until the log has a line matching `pattern`; False if the run ended first."""
        log, seen = self.log_file(), 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists():
                text = log.read_text(errors="replace")
                if re.search(pattern, text[seen:], re.M):
                    return True
                seen = max(0, len(text) - 200)
            if self.process.poll() is not None:
                return False
            time.sleep(0.02)
        raise AssertionError(f"no {pattern!r} in {log} within {timeout} s")

    def stop(self, grace: float | None = None) -> tuple[int, float, str]:
        """SIGTERM; with `grace`, SIGKILL that many seconds later if it still runs (Kubernetes'
        eviction). (status, seconds to end, stderr's last line)."""
        tic = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace if grace is not None else 120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        seconds = time.monotonic() - tic
        out, self.err = self.process.communicate()
        lines = self.err.strip().splitlines()
        return self.process.returncode, seconds, lines[-1] if lines else ""


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


@pytest.mark.slow
def test_sigterm_as_each_node_starts_stops_the_run_naming_it_and_the_next_run_completes(
        tmp_path, penguins_run):
    """Run after run, SIGTERM as the next node starts (each earlier one cached by then): every
    run ends within seconds, status 5, its last line naming that node; nothing is pushed (but by
    a Pusher that finished first, once); then a run completes, and the one version pushed is the
    model a clean run pushes."""
    run = PipelineRun(tmp_path)
    for node in NODES:
        started = Run(run)
        assert started.wait_for_log(rf"Component {node} is running\."), \
            started.process.communicate()[1][-2000:]
        status, seconds, line = started.stop()
        assert status == STOPPED_STATUS, line
        assert seconds < WITHIN_SECONDS, (node, seconds)
        named = _STOPPED.match(line)
        assert named and node in (named.group("nodes") or "").split(", "), (node, line)
        assert line.endswith("run again: the components that completed are reused"), line
        # Nothing is pushed, but by a Pusher whose (atomic) push completed before the signal
        # landed (a fresh-clone CI on a loaded machine saw it): then one whole version, which
        # the next run does not push again (a model is pushed once).
        pushed = _complete_versions(run)
        assert pushed == [] or (node == "Pusher" and len(pushed) == 1), (node, pushed)
    result = run.run()
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"^  CsvExampleGen +cached", result.stdout, re.M), result.stdout
    [version] = _complete_versions(run)
    _same_model_as(version, penguins_run.pushed_versions()[0])


@pytest.mark.slow
def test_sigterm_at_random_instants_is_never_lost_and_an_eviction_leaves_no_partial_version(
        tmp_path, penguins_run):
    """SIGTERM at random instants of runs (LOCKSTEP_SIGTERM_INSTANTS of them; each run trains
    another number of steps, so the Trainer, the Evaluator and the Pusher run every time; a
    fresh root every fourth): a run the signal reached while it lasted ends within seconds with
    status 5 and a `stopped by SIGTERM` line, never status 0. Then Kubernetes' eviction: SIGTERM,
    SIGKILL after LOCKSTEP_GRACE_SECONDS. The serving dir never holds a partial version, and the
    next run completes."""
    rng = random.Random(int(os.environ.get("LOCKSTEP_SIGTERM_SEED", "0")))
    instants = int(os.environ.get("LOCKSTEP_SIGTERM_INSTANTS", "1"))
    grace = float(os.environ.get("LOCKSTEP_GRACE_SECONDS", "3"))
    outcomes = []
    for i in range(instants + 1):
        run = PipelineRun(tmp_path / f"root-{i // 4}")
        run.root.mkdir(exist_ok=True)
        started = Run(run, "--train-steps", str(300 + i))
        started.log_file()
        delay = rng.uniform(0, 40)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and started.process.poll() is None:
            time.sleep(0.01)
        if started.process.poll() is not None:  # ended before the instant: nothing to stop
            outcomes.append((round(delay, 2), "ended first", started.process.returncode))
            started.process.communicate()
            continue
        evicting = i == instants
        status, seconds, line = started.stop(grace=grace if evicting else None)
        outcomes.append((round(delay, 2), status, round(seconds, 2), line[:90]))
        if evicting:
            assert status in (STOPPED_STATUS, -signal.SIGKILL), outcomes
        else:
            assert status == STOPPED_STATUS and "stopped by SIGTERM" in line, (
                outcomes, started.err[-3000:])
            assert seconds < WITHIN_SECONDS, outcomes
        _complete_versions(run)
    print("\n".join(map(str, outcomes)))
    result = run.run()
    assert result.returncode == 0, result.stderr[-2000:]
    _complete_versions(run)
