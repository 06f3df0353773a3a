"""What the benchmarks share: the repository root and a timed run of a command in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(cmd, cwd) -> float:
    """Wall seconds of one command; exits with its stderr if it fails."""
    return timed_output(cmd, cwd)[0]


def timed_output(cmd, cwd) -> tuple[float, str]:
    """(wall seconds, stdout) of one command; exits with its stderr if it fails."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    tic = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - tic
    if result.returncode:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def process_tree(root: int) -> set[int]:
    """A process and all its descendants, from /proc (Linux): every process's parent is one
    cheap read."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # it exited while being read
                pass
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - tree
        tree |= frontier
    return tree
