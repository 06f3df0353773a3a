"""SIGTERM while training: a checkpoint first, then a clean stop.

Kubernetes ends a pod it evicts (a preempted TPU or GPU node, a drained machine) with SIGTERM,
then SIGKILL after the grace period (30 s by default); so does a user's `kill`. Left to its
default, SIGTERM ends the process at once and the steps since the last checkpoint are lost.
While the Controller trains (trainer_module/controller.py), `checkpoint_on_sigterm` makes SIGTERM
only raise a flag; the Controller sees it after the chunk that is running (milliseconds to a
second), saves a checkpoint at that exact step and raises Preempted. The task or run then exits
with PREEMPTED_STATUS, and its retry resumes from that step to the weights an uninterrupted run
ends with.

A SIGTERM that comes after the Controller's last look at the flag (while the last checkpoint is
saved, or as early stopping ends training) is not dropped: as the block ends, it goes to the
handler the process had before, which stops whatever runs next.

Outside training nothing is worth saving, but a stop must still be one: `stop_on_sigterm` makes
SIGTERM raise Stopped, naming what ran, in the main thread. Code that catches every exception
(AutoGraph's fallback, a finalizer, a library's retry) can swallow one raise; so the stop is also
a flag the caller checks at each hand-over (`check`), and while the block still runs the signal is
sent to the main thread again every REDELIVER_SECONDS, until the Stopped gets out.

Signals reach Python's main thread only, so these blocks act only there (the Trainer task,
`lockstep run`'s process); elsewhere they do nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator

from runtime import exit_status

# The exit status of a process stopped by SIGTERM after saving: distinct from a failure (1), so a
# runner or a person can tell "run again to resume" from "something is wrong".
PREEMPTED_STATUS = exit_status.STOPPED

_requested = threading.Event()
# While a stop_on_sigterm block runs after SIGTERM, the signal is sent again this often, so a
# Stopped swallowed by code that catches every exception is raised again elsewhere.
REDELIVER_SECONDS = 2.0


# Who SIGTERM reached when one process trains alone (several: their task names, "worker 2").
ALONE = "this process"


class Preempted(Exception):
    """SIGTERM arrived while training; a checkpoint was saved at `step`, where a retry resumes."""

    lockstep_exit_status = exit_status.STOPPED

    def __init__(self, step: int, checkpoint: str, signalled: list[str] | None = None):
        several = signalled and signalled != [ALONE]
        to = f" to {', '.join(signalled)}" if several else ""
        saved = "every worker saved a checkpoint there" if several else "a checkpoint was saved there"
        super().__init__(f"stopped by SIGTERM{to} at step {step}: {saved} ({checkpoint}); run "
                         "again to resume from it")
        self.step, self.checkpoint, self.signalled = step, checkpoint, list(signalled or [])


class Stopped(Exception):
    """SIGTERM arrived outside training: the message names what ran and what a new run reuses."""

    lockstep_exit_status = exit_status.STOPPED


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
    preempted = False
    try:
        yield
    except Preempted:
        preempted = True
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        unseen = _requested.is_set() and not preempted
        _requested.clear()
        if unseen:  # after the Controller's last look: the stop goes on to whatever runs next
            _deliver(previous)


def _deliver(handler) -> None:
    """SIGTERM, once more, to `handler` (a Python handler: called here; the default: the signal
    sent again, which ends the process; ignored: nothing)."""
    if callable(handler):
        handler(signal.SIGTERM, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signal.SIGTERM)


@contextlib.contextmanager
def stop_on_sigterm(describe: Callable[[], str]) -> Iterator[Callable[[], None]]:
    """While the block runs, SIGTERM raises Stopped(describe()) in the main thread (describe is
    called then: what runs at that instant) and the handler before it comes back afterwards.

    Yields `check`, which raises that Stopped once SIGTERM has arrived: call it at each
    hand-over, so a raise swallowed inside a step still stops the work there. Until the block
    ends, the signal also comes again every REDELIVER_SECONDS. Once SIGTERM has arrived, the block
    ends with that Stopped whatever else it ends with: an error that the raise caused (in the
    middle of an import, inside a library) or none at all. Outside the main thread the block does
    nothing (check never raises)."""
    message: list[str] = []
    ended = threading.Event()

    def check() -> None:
        if message:
            raise Stopped(message[0])

    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    main = threading.main_thread().ident

    def again() -> None:
        while not ended.wait(REDELIVER_SECONDS):
            signal.pthread_kill(main, signal.SIGTERM)

    def stop(signum, frame):
        if not message:
            message.append(describe())
            threading.Thread(target=again, daemon=True, name="lockstep-sigterm-again").start()
        raise Stopped(message[0])

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield check
        check()  # a raise swallowed after the last hand-over
    except Stopped as err:
        if message and str(err) != message[0]:  # rewritten on its way (Keras adds the layer)
            raise Stopped(message[0]) from err
        raise
    except BaseException as err:  # what a raise in the middle of an import or a library became
        if message:
            raise Stopped(message[0]) from err
        raise
    finally:
        ended.set()
        signal.signal(signal.SIGTERM, previous)
