"""Memory between and within components.

The local runner runs components in this process and one worker process, each component in a
process that ran others before it (pipeline/local/dag_runner.py), which matters twice:

- Garbage in cycles waits for a full collection. Python runs one only when the objects that
  survived since the last one number a quarter of all long-lived objects, and TensorFlow, Beam
  and TFX leave about 600k of those, so a full collection comes about every 150k survivors.
  TFMA's per-example extracts are such garbage (each split batch sits in a cycle until then):
  with 200k eval rows the Evaluator's RSS grew linearly by 0.5 GB, all of it extracts a
  collection would have freed. `objects_frozen` moves the objects alive when the Evaluator starts
  into Python's permanent generation, so full collections come after a quarter of the new
  objects only and walk only those (1.3 s in all over the 1M-row run's Evaluator).
- Tensors and Beam's buffers are freed into glibc malloc's arenas, which keep pages they could
  give back; `release_free_memory` at the end of the big users (Trainer, Evaluator), and in
  the worker after each component, lets the next one start from what is really in use.

The Trainer's collection frees its training input, a MultiDeviceIterator under a synchronous
strategy, at once: its host pipeline and its per-device iterators run without tf.data's
autotuning, whose thread TensorFlow 2.16 waited out on destruction, holding the GIL: for minutes
with 8 replicas' device iterators, for seconds the host pipeline's on a busy core
(trainer_module/strategy.py, quiet_device_iterators; trainer_module/input_pipeline.py, untuned;
tests/test_input_teardown.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc


def release_free_memory() -> None:
    """Collects cycles (tf.function graphs and datasets hold some) and trims the heap."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


@contextlib.contextmanager
def objects_frozen():
    """Runs the body with the objects alive at its start out of the cycle collector's way (see
    the module docstring); afterwards freed memory is released. What is garbage at the start is
    collected first, not frozen.

    Afterwards the objects are collectable again, unless something was frozen before the body
    started: Python thaws all or nothing, and in a process of a run the imports are frozen
    (runtime/processes.py: `imports_uncollected`, and a fork's parent), so a thaw would
    hand the 900k objects of TensorFlow, TFX and Beam back to every later collection, the one
    here first (0.3 to 0.5 s of each run). There what was alive as the body started stays frozen
    until the process ends or thaws everything (a test module's end, tests/conftest.py)."""
    thaw = gc.get_freeze_count() == 0
    release_free_memory()
    gc.freeze()
    # The collector paces full collections by the survivors of the last one; that count still
    # includes what is now frozen until a collection runs, which now walks nothing.
    gc.collect()
    try:
        yield
    finally:
        if thaw:
            gc.unfreeze()
        release_free_memory()
