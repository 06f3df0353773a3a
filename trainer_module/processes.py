"""What a child process of lockstep needs from its parent: an environment in which it imports
what the parent imports (the worker lane, the serving check, the equivalence check's and the
parameter-server trainer's processes), free ports on loopback for a cluster of them, an end
with its parent (`die_with_parent`), and whether a fork of this process can run TensorFlow
(`may_fork`)."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path
from typing import Iterable

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # lockstep's packages live here


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


_IMPORTED_ONLY: list[bool] = []  # this process said: TensorFlow imported, none of it run


def may_fork() -> bool:
    """Whether a fork of this process can run TensorFlow: none of TensorFlow's thread pools
    (which do not survive a fork) can exist here. True where TensorFlow is not even imported (a
    `lockstep run` process before its runner's imports); or where this process, or the one it
    was forked from, said it only imported it (`tensorflow_imported_only`) and TensorFlow's eager
    context has not been made since. False elsewhere (a test's process, a notebook): an op may
    have run there, and a graph Session's leaves no mark a check could read."""
    if "tensorflow" not in sys.modules:
        return True
    if not _IMPORTED_ONLY:
        return False
    from tensorflow.python.eager import context

    return context.context_safe() is None


def tensorflow_imported_only() -> None:
    """Said by a process that has imported TensorFlow and runs none of it: a fork server that
    imports what `lockstep run` imports and forks a run for each request (tests/forked_cli.py).
    Its forks inherit the word; a fork that goes on to run an eager op (a user's loss checked
    before the run) makes TensorFlow's context, and `may_fork` is False again. Say it only where
    no graph Session runs before a fork checks `may_fork`."""
    _IMPORTED_ONLY[:] = [True]


def free_ports(n: int) -> list[int]:
    """n free TCP ports on loopback (for a cluster of worker processes)."""
    sockets = [socket.socket() for _ in range(n)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports
