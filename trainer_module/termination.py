"""SIGTERM while training: a checkpoint first, then a clean stop.

Kubernetes ends a pod it evicts (a preempted TPU or GPU node, a drained machine) with SIGTERM,
then SIGKILL after the grace period (30 s by default); so does a user's `kill`. Left to its
default, SIGTERM ends the process at once and the steps since the last checkpoint are lost.
While the Controller trains (trainer_module/controller.py), `checkpoint_on_sigterm` makes SIGTERM
only raise a flag; the Controller sees it after the chunk that is running (milliseconds to a
second), saves a checkpoint at that exact step and raises Preempted. The task or run then exits
with PREEMPTED_STATUS, and its retry resumes from that step to the weights an uninterrupted run
ends with.

Outside training nothing is worth saving: SIGTERM keeps whatever handler the process had.
Signals reach Python's main thread only, so the flag is set only where training runs on it (the
Trainer task, `lockstep run`'s process); elsewhere the block does nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

# The exit status of a process stopped by SIGTERM after saving: distinct from a failure (1), so a
# runner or a person can tell "run again to resume" from "something is wrong".
PREEMPTED_STATUS = 5

_requested = threading.Event()


class Preempted(Exception):
    """SIGTERM arrived while training; a checkpoint was saved at `step`, where a retry resumes."""

    def __init__(self, step: int, checkpoint: str):
        super().__init__(f"stopped by SIGTERM at step {step}: a checkpoint was saved there "
                         f"({checkpoint}); run again to resume from it")
        self.step, self.checkpoint = step, checkpoint


def requested() -> bool:
    """Whether SIGTERM arrived while checkpoint_on_sigterm was in force."""
    return _requested.is_set()


@contextlib.contextmanager
def checkpoint_on_sigterm() -> Iterator[None]:
    """While the block runs, SIGTERM sets `requested()` instead of ending the process (main
    thread only); the handler before it comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested.clear()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: _requested.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _requested.clear()
