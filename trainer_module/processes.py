"""What a child process of lockstep needs from its parent: an environment in which it imports
what the parent imports (the worker lane, the serving check, the equivalence check's and the
parameter-server trainer's processes), and free ports on loopback for a cluster of them."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Iterable

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # lockstep's packages live here


def python_env(paths: Iterable[str] = (), **variables: str) -> dict[str, str]:
    """os.environ with `variables` set, and PYTHONPATH: what it holds now (a user's hook
    directory first: trainer_module/hooks.py), then `paths`, then lockstep's own root, each once."""
    current = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    path = list(dict.fromkeys(p for p in [*current, *paths, PACKAGE_ROOT] if p))
    return dict(os.environ, **variables, PYTHONPATH=os.pathsep.join(path))


def free_ports(n: int) -> list[int]:
    """n free TCP ports on loopback (for a cluster of worker processes)."""
    sockets = [socket.socket() for _ in range(n)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports
