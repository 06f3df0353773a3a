"""The environment of a child Python process that must import what this one imports (the worker
lane, the serving check, `verify`'s and the parameter-server trainer's processes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # lockstep's packages live here


def python_env(paths: Iterable[str] = (), **variables: str) -> dict[str, str]:
    """os.environ with `variables` set, and PYTHONPATH: what it holds now (a user's hook
    directory first: trainer_module/hooks.py), then `paths`, then lockstep's own root, each once."""
    current = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    path = list(dict.fromkeys(p for p in [*current, *paths, PACKAGE_ROOT] if p))
    return dict(os.environ, **variables, PYTHONPATH=os.pathsep.join(path))
