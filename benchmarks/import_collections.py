"""What a lockstep process pays to import its libraries, plainly beside inside
runtime/processes.py's `imports_uncollected` (the cycle collector off through the imports,
what they made frozen after), alternated.

Each round imports the module in a fresh interpreter, pinned to one core (os.sched_setaffinity),
once each way. By default the module is what a `lockstep run`'s runner imports before its first
node (pipeline.local.dag_runner: TensorFlow, TFX, Beam, TFMA), as a pipeline task, the worker
lane and the serving check import theirs. Per way, the median over the rounds of: the import's
wall and CPU seconds, the full collections that ran during it and their seconds, the objects
then alive, and one full collection afterwards (what each later one walks, where the imports
are frozen or not). Then the ratios plain / uncollected.

usage: python benchmarks/import_collections.py [--rounds 5] [--module pipeline.local.dag_runner]
                                               [--smoke]
--smoke: one round each way of a smaller import (apache_beam): does it run and print its table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from harness import REPO

WAYS = ("plain", "uncollected")

# The child: imports the module one way, and prints its figures as one JSON line.
_CHILD = """
import gc, json, resource, sys, time
from runtime import processes

full = []
def count(phase, info, started=[0.0]):
    if info["generation"] == 2:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            full.append(time.perf_counter() - started[0])
gc.callbacks.append(count)
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu0, tic = usage.ru_utime + usage.ru_stime, time.perf_counter()
if sys.argv[2] == "plain":
    __import__(sys.argv[1])
else:
    with processes.imports_uncollected():
        __import__(sys.argv[1])
wall = time.perf_counter() - tic
usage = resource.getrusage(resource.RUSAGE_SELF)
gc.callbacks.remove(count)
alive = len(gc.get_objects())
tic = time.perf_counter()
gc.collect()
print(json.dumps({"import wall s": wall, "import CPU s": usage.ru_utime + usage.ru_stime - cpu0,
                  "full collections": len(full), "their s": sum(full), "objects a collection walks": alive,
                  "a later full collection s": time.perf_counter() - tic,
                  "peak RSS MB": usage.ru_maxrss / 1024}))
"""


def one_import(module: str, way: str, cpu: int) -> dict[str, float]:
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _CHILD, module, way], cwd=REPO, env=env,
                          capture_output=True, text=True,
                          preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    if done.returncode:
        sys.exit(f"importing {module} ({way}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--module", default="pipeline.local.dag_runner")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rounds, module = (1, "apache_beam") if args.smoke else (args.rounds, args.module)
    cpu = sorted(os.sched_getaffinity(0))[0]
    seen: dict[str, list[dict]] = {way: [] for way in WAYS}
    for i in range(rounds):
        for way in (WAYS if i % 2 == 0 else WAYS[::-1]):  # alternated: neither always first
            seen[way].append(one_import(module, way, cpu))
    figures = list(seen["plain"][0])
    median = {way: {f: statistics.median(r[f] for r in seen[way]) for f in figures}
              for way in WAYS}
    print(f"importing {module}, median of {rounds} fresh interpreter(s) each way, one core:")
    print(f"{'':28}{'plain':>12}{'uncollected':>14}{'plain / unc.':>14}")
    for figure in figures:
        plain, ours = median["plain"][figure], median["uncollected"][figure]
        ratio = f"x{plain / ours:.2f}" if ours >= 0.01 else "-"
        print(f"{figure:28}{plain:12.3f}{ours:14.3f}{ratio:>14}")
    print(f"import_collections: plain / uncollected import CPU = "
          f"{median['plain']['import CPU s'] / median['uncollected']['import CPU s']:.2f}; a later "
          f"full collection {median['plain']['a later full collection s']:.3f} s / "
          f"{median['uncollected']['a later full collection s']:.3f} s")


if __name__ == "__main__":
    main()
