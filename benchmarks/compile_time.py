"""Wall time of `lockstep compile` beside a stock TFX compile of the same pipeline (the reference
pipeline of the TFX tutorials: `from tfx import v1`, module_file, a Resolver, KubeflowV2DagRunner),
each in a fresh process, alternating, in one run. Prints each time and the ratio of medians.

usage: python benchmarks/compile_time.py [--rounds N] [--smoke]
--smoke: one round (does it run and print its table)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from harness import REPO, timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="one round")
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1
    work = Path(tempfile.mkdtemp(prefix="lockstep-compile-bench-"))
    data = REPO / "data" / "penguins"
    times: dict[str, list[float]] = {"stock TFX": [], "lockstep": []}
    for i in range(args.rounds):
        stock_root, ours_root = work / f"stock-{i}", work / f"ours-{i}"
        stock_root.mkdir()
        ours_root.mkdir()
        times["stock TFX"].append(timed(
            [sys.executable, str(REPO / "benchmarks" / "reference" / "pipeline.py"), str(data),
             str(stock_root), "--kubeflow", str(stock_root / "pipeline.json")], stock_root))
        times["lockstep"].append(timed(
            [sys.executable, "-m", "pipeline.cli", "compile", "--output",
             str(ours_root / "pipeline.yaml"), "--pipeline-root", str(ours_root / "root")],
            ours_root))
        print(f"round {i + 1}: stock TFX {times['stock TFX'][-1]:.1f}s, "
              f"lockstep {times['lockstep'][-1]:.1f}s", flush=True)
    stock, ours = statistics.median(times["stock TFX"]), statistics.median(times["lockstep"])
    print(f"\nmedian of {args.rounds}: stock TFX compile {stock:.1f}s, lockstep compile {ours:.1f}s")
    print(f"ratio lockstep / stock = {ours / stock:.2f}  (goal: lockstep under 5 s)")


if __name__ == "__main__":
    main()
