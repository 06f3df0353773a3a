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
gc.collect()
print(peak, alive[0], gc.get_freeze_count())
"""


def _peak_batches_alive(frozen: bool) -> tuple[int, int, int]:
    root = str(REPO)
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(root=root, frozen=frozen)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1]), int(out[2])


def test_cyclic_garbage_is_collected_promptly_while_objects_are_frozen():
    peak_plain, left_plain, _ = _peak_batches_alive(frozen=False)
    peak_frozen, left_frozen, frozen_after = _peak_batches_alive(frozen=True)
    # Without the freeze the dropped batches pile up until the survivors reach a quarter of the
    # long-lived objects (each batch is 1,400 containers of garbage) ...
    assert peak_plain >= 150, peak_plain
    # ... with it only the collector's own cadence is left (a full collection every 100 young
    # ones), whatever the number of long-lived objects.
    assert peak_frozen <= 70, peak_frozen
    # Either way every batch is freed in the end, and nothing stays frozen.
    assert left_plain == left_frozen == 0
    assert frozen_after == 0
