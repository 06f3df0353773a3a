"""A non-chief worker's scratch directory: what only the chief keeps (its checkpoints, its
export) written where it is removed at the end (trainer_module/train.py)."""

from __future__ import annotations

import os
import shutil
import tempfile


class Scratch:
    """A non-chief worker's own directory for what only the chief keeps (its checkpoints, its
    export): made on first use, removed whole on the way out, however training ends."""

    def __init__(self, chief: bool):
        self._chief, self._root = chief, None

    def mkdir(self, name: str) -> str:
        assert not self._chief, "the chief writes where the job says"
        if self._root is None:
            self._root = tempfile.mkdtemp(prefix="lockstep-worker-")
        path = os.path.join(self._root, name)
        os.makedirs(path, exist_ok=True)
        return path

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
