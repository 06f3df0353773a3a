"""A non-chief worker's scratch directory (trainer_module/scratch.py) on a real filesystem: one
left by a worker killed outright (SIGKILL, as a preemption's grace ends) is removed when the next
worker makes its own, also where a fork of the killed worker lives on (a fork closes its copy of
the lock); a live worker's is not."""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainer_module import scratch

REPO = Path(__file__).resolve().parents[2]
WORKER = """
import os, sys, time
sys.path.insert(0, {repo!r})
from trainer_module import scratch
s = scratch.Scratch(chief=False)
path = s.mkdir("ckpt")
open(os.path.join(path, "ckpt-1.index"), "w").write("x")
if {fork}:
    if os.fork() == 0:  # a child that outlives the worker
        time.sleep(60)
        os._exit(0)
print(os.path.dirname(path), flush=True)
time.sleep(60)
"""


def _worker(tmp_path, fork=False):
    """A worker process (only scratch.py imported) that made its scratch under tmp_path and
    waits; (the process, its scratch directory)."""
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER.format(repo=str(REPO), fork=fork)],
        env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    return process, Path(process.stdout.readline().strip())


def test_a_killed_workers_scratch_goes_when_the_next_is_made_and_a_live_ones_stays(
        tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed, killed_dir = _worker(tmp_path)
    live, live_dir = _worker(tmp_path)
    forked, forked_dir = _worker(tmp_path, fork=True)
    other = tmp_path / "lockstep-worker-made-before-the-lock"  # no .owner: left as it is
    (other / "ckpt").mkdir(parents=True)
    try:
        assert killed_dir.parent == tmp_path and (killed_dir / "ckpt" / "ckpt-1.index").exists()
        killed.send_signal(signal.SIGKILL)
        forked.send_signal(signal.SIGKILL)  # the worker; its child lives on
        killed.wait(30), forked.wait(30)
        assert killed_dir.exists()  # nothing of the killed worker's ran
        with scratch.Scratch(chief=False) as mine:
            own = Path(mine.mkdir("ckpt")).parent
            assert not killed_dir.exists() and not forked_dir.exists()
            assert (live_dir / "ckpt" / "ckpt-1.index").exists() and other.exists()
            assert scratch.sweep(str(tmp_path)) == []  # its own is held too
        assert not own.exists()
        assert live_dir.exists()
    finally:
        for process in (killed, live, forked):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the forked worker's child too
            process.wait(30)
    time.sleep(0.1)
    assert scratch.sweep(str(tmp_path)) == [str(live_dir)]
