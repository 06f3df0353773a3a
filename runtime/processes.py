"""What a child process of lockstep needs from its parent: an environment in which it imports
what the parent imports (the worker lane, the serving check, the equivalence check's and the
parameter-server trainer's processes), free ports on loopback for a cluster of them, an end
with its parent (`die_with_parent`), a fork seen as the subprocess.Popen a fresh interpreter
would be (where trainer_module/fork_safety.py's `may_fork` says TensorFlow survives one)
(`Forked`), imports that pay no cycle collection (`imports_uncollected`: a process's start), and
the end of a lockstep process (`exit_now`: the CLI's and a pipeline task's)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Iterable

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # lockstep's packages live here
# How long a process that ends with an error or a stop waits for the threads it did not start as
# daemons: a library's thread that an interrupted call left running (Beam's state sampler, when a
# SIGTERM's raise lands between its thread's start and its `started = True`) would keep it alive
# for good, as Python's own exit would (it joins them all, without limit).
STRAGGLER_SECONDS = 2.0


def python_env(paths: Iterable[str] = (), **variables: str) -> dict[str, str]:
    """os.environ with `variables` set, and PYTHONPATH: what it holds now (a user's hook
    directory first: trainer_module/hooks.py), then `paths`, then lockstep's own root, each once."""
    current = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    path = list(dict.fromkeys(p for p in [*current, *paths, PACKAGE_ROOT] if p))
    return dict(os.environ, **variables, PYTHONPATH=os.pathsep.join(path))


def die_with_parent() -> None:
    """In a child, before it runs (subprocess's preexec_fn, or after a fork): the kernel kills it
    when its parent ends (a run stopped by its time limit or a signal, or killed), rather than
    leaving it working for no one. Linux only; elsewhere nothing."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def imports_uncollected():
    """The body's imports made with the cycle collector off, then moved to its permanent
    generation (gc.freeze). Python collects every generation each time the objects that survived
    its last full collection grow by a quarter; TensorFlow, TFX and Beam make some 850k objects
    as they import, so an import of them paid eight full collections, each walking all that was
    imported so far, to free a few hundred objects (1.1 of the 5.6 CPU-s the runner's import took
    on an idle core, 2 of 8.7 on a busy machine: benchmarks/import_collections.py). What an import
    makes lives as long as the process, which is what a collection would conclude; frozen, it is
    also walked by no later collection (and not written to, so a fork's pages stay shared). The
    caller's state is kept: a collector that was off stays off. Around the imports a process
    starts with (a run's runner, a pipeline task's executor, the worker lane), not around work:
    garbage made in the body is frozen with it, until the process ends (components/memory.py's
    `objects_frozen` leaves it frozen too)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def entry_imports_done() -> None:
    """Where this process was started as one of runtime's ENTRIES (`python -m
    trainer_module.train`, ...: runtime/__init__.py turned the cycle collector off for its
    imports), what they made is frozen and the collector is on again; elsewhere, nothing. Each
    entry calls it as `__main__`, its imports made."""
    import runtime

    if runtime.IMPORTS_UNCOLLECTED and not gc.isenabled():
        gc.freeze()
        gc.enable()


def free_ports(n: int) -> list[int]:
    """n free TCP ports on loopback (for a cluster of worker processes)."""
    sockets = [socket.socket() for _ in range(n)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


class Forked:
    """This process forked, seen as the subprocess.Popen a fresh child would be (stdin, stdout,
    pid, poll, kill, wait): the child runs `child(requests_fd, answers_fd)`, the other ends of the
    two pipes that are `stdin` and `stdout` here, and exits with what it returns (1 if it raises,
    the traceback on its stderr), never running this process's atexit handlers or buffers. It
    dies with this process. Fork only where trainer_module/fork_safety.py's `may_fork()`; the
    child starts as `as_a_fresh_child` leaves it only if it calls that."""

    def __init__(self, child: Callable[[int, int], int], text: bool = False):
        requests, self_requests = os.pipe()
        self_answers, answers = os.pipe()
        # What both processes hold as they part (the imports) leaves the collector's generations:
        # no collection in either then writes to (so copies) every page of it they share.
        gc.freeze()
        _flush(sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)  # nothing written twice
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(self_requests), os.close(self_answers)
                die_with_parent()
                if os.getppid() == parent:  # else it ended before the line above
                    status = child(requests, answers)
            except BaseException:  # noqa: BLE001  on its stderr; the parent sees the status
                traceback.print_exc()
            finally:
                _flush(sys.stdout, sys.stderr)
                os._exit(status if isinstance(status, int) else 1)
        os.close(requests), os.close(answers)
        self.pid, self.returncode = pid, None
        mode = "" if text else "b"
        self.stdin = os.fdopen(self_requests, "w" + mode)
        self.stdout = os.fdopen(self_answers, "r" + mode)
        self._reaping = threading.Lock()  # threads that poll at once: one reaps

    def poll(self) -> int | None:
        with self._reaping:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped, and not by this object: its status is lost
                    pid, status = self.pid, 255 << 8
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status (-N for signal N), polled: not a blocking waitpid, so that another
        thread may poll meanwhile. Raises subprocess.TimeoutExpired after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"fork {self.pid}", timeout)
            time.sleep(0.01)
        return code


def exit_now(status: int | str | None) -> None:
    """Ends the process as Python's exit does (other threads joined, atexit handlers run: logs
    flushed and closed, temporary directories removed, output flushed), without the teardown
    after it. Once TensorFlow, TFX and TFMA are loaded, that teardown (freeing every module and
    object one by one) took 1.4 s of every command here; the kernel frees the memory at once.

    Ending with an error or a stop (a status other than 0), it waits for the other threads
    STRAGGLER_SECONDS in all, not for ever: the work they did is abandoned, and a thread that an
    interrupted library left running must not hang the process (a `lockstep run` stopped by
    SIGTERM as a Beam stage started did, 1 in 80 here). Where a log handler is still in place (a
    pipeline task's), a line names those it left: never on stderr, whose last line is the
    error's."""
    import atexit

    deadline = None if status in (0, None) else time.monotonic() + STRAGGLER_SECONDS
    left = []
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                left.append(f"{thread.name} ({getattr(thread, '_target', None)})")
    if left and logging.getLogger().handlers:
        logging.getLogger(__name__).warning(
            "exiting (status %s) with %d thread(s) still running, left by what the error or the "
            "stop interrupted: %s", status, len(left), ", ".join(left))
    atexit._run_exitfuncs()
    _flush(sys.stdout, sys.stderr)
    os._exit(0 if status is None else status if isinstance(status, int) else 1)


def as_a_fresh_child() -> None:
    """In a fork: signals as an interpreter starts them, and no logging handler of the parent's
    (a run's console writes to the terminal): the records of every logger are again as in a
    process that configured none. sys.stdout and sys.stderr are the streams on fds 1 and 2."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    for logger in loggers:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)


def _flush(*streams) -> None:
    for stream in streams:
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # None, or closed
            pass
