"""`swapped`: a module's name bound to another value for the length of a `with` block.

Some of TFX's and TFMA's executors take what lockstep changes (the TFXIO factory, the transform
processor, a combiner's fanout) from a module-level name, looked up when their Do runs; the
executors in components/ rebind that name around their Do, and put it back however Do ends."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def swapped(owner, name: str, value):
    """`owner.name` is `value` inside the block, and what it was before after it."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)
