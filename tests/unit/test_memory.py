"""components/memory.py: cyclic garbage is collected while a component runs, not left to pile up
behind the long-lived objects TensorFlow and Beam leave (the Evaluator's RSS grew 0.5 GB that way
at 200k eval rows).

Each case runs in a fresh interpreter, so the collector's state is the script's own: 1.2M
long-lived objects (importing TensorFlow, Beam and TFX leaves 600k; loading models and tracing
add more), then batches shaped like TFMA's split extracts: a list of dicts in use across many
allocations (so it is promoted to the oldest generation), in a cycle through a closure, then
dropped."""

import subprocess
import sys

from conftest import REPO

SCRIPT = r"""
import gc, sys, weakref
sys.path.insert(0, {root!r})
from components.memory import objects_frozen

long_lived = [[i] for i in range(1_200_000)]  # lists: always tracked by the collector
gc.collect()
if {prefrozen}:  # as a run's process, whose imports are frozen
    gc.freeze()

class Sentinel:
    pass

alive, peak = [0], 0
def dropped():
    alive[0] -= 1

def split_batch():  # shaped like TFMA's split_extracts: its results list and a closure over it
    results = [{{"features": {{"x": float(i)}}, "labels": [i]}} for i in range(700)]
    def add_to_results():
        return results
    results.append(add_to_results)  # results -> closure -> cell -> results: a cycle
    sentinel = Sentinel()
    results.append(sentinel)
    weakref.finalize(sentinel, dropped)
    return results

def batches(n):
    global peak
    in_flight = []  # the last few batches stay in use for a while, so they reach the oldest generation
    for _ in range(n):
        in_flight = in_flight[-7:] + [split_batch()]
        alive[0] += 1
        peak = max(peak, alive[0])
    del in_flight

if {frozen}:
    with objects_frozen():
        batches(400)
else:
    batches(400)
frozen_at_end = gc.get_freeze_count()
gc.collect()
print(peak, alive[0], frozen_at_end, len(gc.get_objects()))
"""


def _peak_batches_alive(frozen: bool, prefrozen: bool = False) -> tuple[int, int, int, int]:
    """(the most batches alive at once, those alive at the end, the objects frozen at the end,
    the objects a collection then walks)."""
    root = str(REPO)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=root, frozen=frozen, prefrozen=prefrozen)],
        capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1]), int(out[2]), int(out[3])


def test_cyclic_garbage_is_collected_promptly_while_objects_are_frozen():
    peak_plain, left_plain, _, _ = _peak_batches_alive(frozen=False)
    peak_frozen, left_frozen, frozen_after, walked = _peak_batches_alive(frozen=True)
    # Without the freeze the dropped batches pile up until the survivors reach a quarter of the
    # long-lived objects (each batch is 1,400 containers of garbage) ...
    assert peak_plain >= 150, peak_plain
    # ... with it only the collector's own cadence is left (a full collection every 100 young
    # ones), whatever the number of long-lived objects.
    assert peak_frozen <= 70, peak_frozen
    # Either way every batch is freed in the end, and nothing stays frozen.
    assert left_plain == left_frozen == 0
    assert frozen_after == 0 and walked > 1_200_000


def test_where_the_imports_were_frozen_they_stay_frozen_and_the_garbage_is_still_collected():
    """A run's process froze its imports (runtime/processes.py): objects_frozen does not
    thaw them as it ends (a thaw is all or nothing), so the collection as it ends and every later
    one walk only what is not frozen; the dropped batches are collected all the same."""
    peak, left, frozen_after, walked = _peak_batches_alive(frozen=True, prefrozen=True)
    assert peak <= 70 and left == 0, (peak, left)
    assert frozen_after > 1_200_000 and walked < 100_000, (frozen_after, walked)
