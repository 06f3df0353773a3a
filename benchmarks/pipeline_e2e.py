"""Cold wall time of `lockstep run` beside a reference pipeline written the way the TFX tutorials
do it (module_file, model.fit under MirroredStrategy, stock components), same data, same machine,
one after the other in one run; each in a fresh process and a fresh directory.

The stock CsvExampleGen reads `NA` as text, so the reference gets a copy of the penguins data
with `NA` cells emptied (what a tutorial user would do by hand); lockstep reads the source as is.
usage: python benchmarks/pipeline_e2e.py [--rounds N] [--smoke]
--smoke: one round (the bundled data is already small; does it run and print its table)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import REPO, timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one round")
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1
    work = Path(tempfile.mkdtemp(prefix="lockstep-bench-"))
    data = work / "reference-data"
    data.mkdir()
    source = (REPO / "data" / "penguins" / "penguins.csv").read_text()
    (data / "penguins.csv").write_text(
        "\n".join(",".join("" if c == "NA" else c for c in line.split(","))
                  for line in source.splitlines()) + "\n")
    ours, theirs = [], []
    for i in range(args.rounds):
        theirs.append(timed([sys.executable, str(REPO / "benchmarks/reference/pipeline.py"),
                             str(data), str(work / f"ref{i}")], work))
        ours.append(timed([sys.executable, "-m", "pipeline.cli", "run",
                           "--pipeline-root", str(work / f"ours{i}/root"),
                           "--serving-dir", str(work / f"ours{i}/serving")], work))
        print(f"round {i + 1}: reference {theirs[-1]:.1f}s, lockstep {ours[-1]:.1f}s", flush=True)
    best_ours, best_theirs = min(ours), min(theirs)
    print(f"cold wall time: reference {best_theirs:.1f}s, lockstep {best_ours:.1f}s")
    print(f"lockstep / reference = {best_ours / best_theirs:.2f}  (goal <= 0.5)")


if __name__ == "__main__":
    main()
