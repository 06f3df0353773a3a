"""A non-chief worker's scratch directory: what only the chief keeps (its checkpoints, its
export) written where it is removed at the end (trainer_module/train.py).

A worker killed outright (SIGKILL after a preemption's grace, a lost container) cannot remove its
own: each holds an exclusive lock on the `.owner` file in its directory while it lives, the
kernel lets go of that lock when the process dies however it dies (in any PID namespace), and
the next worker to make a scratch directory on the machine removes every one whose lock it can
take. A directory whose lock is held is a live worker's, and is left alone. A fork of the worker
closes its copy of the lock (runtime/held_locks.py, as the run lock's holder's forks do), so a
child that outlives it does not keep its directory."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile

from runtime import held_locks

PREFIX = "lockstep-worker-"
OWNER = ".owner"


class Scratch:
    """A non-chief worker's own directory for what only the chief keeps (its checkpoints, its
    export): made on first use, removed whole on the way out, however training ends; one that a
    killed worker left is removed when the next is made (`sweep`)."""

    def __init__(self, chief: bool):
        self._chief, self._root, self._owner = chief, None, None

    def mkdir(self, name: str) -> str:
        assert not self._chief, "the chief writes where the job says"
        if self._root is None:
            sweep(tempfile.gettempdir())
            self._root = tempfile.mkdtemp(prefix=PREFIX)
            self._owner = open(os.path.join(self._root, OWNER), "w")  # noqa: SIM115  held
            try:
                fcntl.flock(self._owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a filesystem without locks: where no lock is taken none is swept
                pass
            held_locks.hold(self._owner)
        path = os.path.join(self._root, name)
        os.makedirs(path, exist_ok=True)
        return path

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            held_locks.release(self._owner)
            self._owner.close()


def sweep(directory: str) -> list[str]:
    """Remove the scratch directories under `directory` whose owner is gone (its `.owner` lock
    free); returns their paths. One without an `.owner` (being made this instant, or older than
    the lock) is left."""
    removed = []
    for entry in os.scandir(directory):
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            owner = open(os.path.join(entry.path, OWNER))  # noqa: SIM115  closed below
        except OSError:
            continue
        with owner:
            try:
                fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its worker is alive
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed
