"""One run per pipeline root at a time: an flock on `<pipeline_root>/run.lock`, held for the
whole run and released by the kernel however the process ends (killed, crashed, timed out).

The lock file says who holds it (pid, host, start time), so a run that finds it taken can say
since when. A second run waits up to `wait_seconds`, then raises Locked (exit status 3).

A fork of the holder (the run's worker lane, pipeline/local/node_worker.py) closes its copy of
the lock's file as it starts (runtime/held_locks.py): the lock is the run's alone, released as
the run ends even while a fork is still being killed (a run stopped by its time limit ends at
once, with os._exit).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
import time

from runtime import exit_status, held_locks

LOCK_FILE = "run.lock"


class Locked(RuntimeError):
    """Another run holds the lock; the message says which and since when."""

    lockstep_exit_status = exit_status.LOCKED


def default_path(pipeline_root: str) -> str:
    return os.path.join(pipeline_root, LOCK_FILE)


def _holder(handle) -> str:
    try:
        handle.seek(0)
        info = json.loads(handle.read() or "{}")
        since = datetime.datetime.fromtimestamp(info["since"], datetime.timezone.utc)
        minutes = (time.time() - info["since"]) / 60
        return (f"pid {info['pid']} on {info['host']}, running since "
                f"{since:%Y-%m-%d %H:%M:%S} UTC ({minutes:.0f} min)")
    except (ValueError, KeyError, TypeError, OSError):
        return "a run that has not said who it is yet"


@contextlib.contextmanager
def hold(path: str, wait_seconds: float = 0.0, poll_seconds: float = 0.5):
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    handle = open(path, "a+")
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    waited = f" (waited {wait_seconds:g}s)" if wait_seconds else ""
                    raise Locked(f"another lockstep run holds {path}: {_holder(handle)}; not "
                                 f"starting this one{waited}") from None
                time.sleep(poll_seconds)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.time()}))
        handle.flush()
        held_locks.hold(handle)
        yield
    finally:
        held_locks.release(handle)
        handle.close()
