"""Lock files a process holds for itself alone (the run lock, pipeline/local/run_lock.py; a
worker's scratch directory, trainer_module/scratch.py): a fork of the holder closes its copy of
each as it starts, so the lock is released when the holder ends, however it ends, even while a
fork of it lives on."""

from __future__ import annotations

import os

_HELD: list = []  # the lock files this process holds


def hold(handle) -> None:
    """`handle` (an open file whose flock this process took) is this process's alone."""
    _HELD.append(handle)


def release(handle) -> None:
    """`handle` is no longer held (close it after)."""
    if handle in _HELD:
        _HELD.remove(handle)


def _not_in_a_fork() -> None:
    for handle in _HELD:
        try:
            handle.close()  # this process's copy: the holder keeps the lock
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_not_in_a_fork)
