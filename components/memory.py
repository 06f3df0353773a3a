"""Handing freed memory back between components.

LocalDagRunner runs every component in one process. TensorFlow's tensors and Beam's buffers are
freed into glibc malloc's arenas, which keep pages they could give back; the Trainer (its
cache) and the Evaluator (which grows with the eval rows) are the two biggest users, so their
executors call this when they finish (the Evaluator also as it starts), and the next
component starts from what is really in use."""

from __future__ import annotations

import ctypes
import gc


def release_free_memory() -> None:
    """Collects cycles (tf.function graphs and datasets hold some) and trims the heap."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
