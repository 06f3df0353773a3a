"""`swapped`: a module's name bound to another value for the length of a `with` block.

Some of TFX's, TFMA's and kfp.local's code takes what lockstep changes (the TFXIO factory, the
transform processor, a combiner's fanout, a task handler) from a module-level name, looked up when
it runs; the wall (components/compat/) rebinds that name around the call, and puts it back however
the block ends. Only the wall calls it (tools/private_names.py)."""

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
