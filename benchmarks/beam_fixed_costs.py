"""A whole `lockstep run` with Beam's fixed costs spared (components/compat/beam.py's
`spare_fixed_costs`: function signatures and DoFn specs remembered, dill's trace quiet, cloudpickle
for a pipeline that pickles in this process, with its submodules found from an index and its
pickles uncompressed) beside the
same run with Beam's, dill's and cloudpickle's own functions (LOCKSTEP_STOCK_BEAM=1), alternated.

Each run is the real CLI in a fresh process, on a fresh pipeline root, pinned to one core with
--cores 1 (os.sched_setaffinity: a run then has one lane, as on a one-core pod, and the figures
are not the other lane's), on the bundled penguins data or a CSV of yours. Per variant, the
median over the rounds of: the stage seconds of the four components that run Beam pipelines
(CsvExampleGen, StatisticsGen, Transform, Evaluator), the summary's Total, the process's wall
time and its CPU seconds (user + system, its waited-for children included). Then the ratios
stock / spared.

usage: python benchmarks/beam_fixed_costs.py [--rounds 3] [--cores N] [--data PATH --label NAME]
                                             [--smoke]
--smoke: one round each way (does it run and print its table)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO

BEAM_STAGES = ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator")
VARIANTS = {"stock": {"LOCKSTEP_STOCK_BEAM": "1"}, "spared": {}}
_STAGE = re.compile(r"^  (\w+)\s+executed\s+([\d.]+)s$", re.M)
_TOTAL = re.compile(r"^Total: ([\d.]+)s$", re.M)


def one_run(work: Path, variant: str, cores: int, data: list[str]) -> dict[str, float]:
    """Stage seconds, Total, wall and CPU seconds of one `lockstep run` in a fresh process."""
    root = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=work))
    env = {name: value for name, value in os.environ.items()
           if name != "LOCKSTEP_STOCK_BEAM"}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO),
               **VARIANTS[variant])
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    command = [sys.executable, "-m", "pipeline.cli", "run", *data,
               "--pipeline-root", str(root / "pipeline_root"), "--serving-dir", str(root / "serving")]
    tic = time.perf_counter()
    with open(root / "stdout.txt", "w") as out, open(root / "stderr.txt", "w") as err:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=err,
                                   preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - tic
    printed = (root / "stdout.txt").read_text()
    total = _TOTAL.search(printed)
    if os.waitstatus_to_exitcode(status) or not total:
        sys.exit(f"{variant} run failed (its output: {root}):\n"
                 + (root / "stderr.txt").read_text()[-3000:])
    stages = {name: float(seconds) for name, seconds in _STAGE.findall(printed)}
    figures = {stage: stages.get(stage, 0.0) for stage in BEAM_STAGES}
    figures.update({"Beam stages": sum(figures.values()), "Total": float(total.group(1)),
                    "process wall": wall, "process CPU": usage.ru_utime + usage.ru_stime})
    shutil.rmtree(root)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=1, help="cores each run may use")
    parser.add_argument("--data", help="a CSV file or directory (default: the bundled penguins)")
    parser.add_argument("--label", help="its label column")
    parser.add_argument("--smoke", action="store_true", help="one round each way")
    args = parser.parse_args()
    if bool(args.data) != bool(args.label):
        parser.error("--data and --label go together")
    rounds = 1 if args.smoke else args.rounds
    data = ["--data", str(Path(args.data).resolve()), "--label", args.label] if args.data else []
    work = Path(tempfile.mkdtemp(prefix="lockstep-beam-fixed-costs-"))
    print(f"work directory: {work}", flush=True)
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for index in range(rounds):
        order = list(VARIANTS) if index % 2 == 0 else list(reversed(VARIANTS))
        for variant in order:  # alternated, each first in turn: drift falls on both
            runs[variant].append(one_run(work, variant, args.cores, data))
            print(f"  round {index + 1} {variant:<10} Total {runs[variant][-1]['Total']:5.1f}s",
                  flush=True)
    shutil.rmtree(work)
    median = {variant: {key: statistics.median(run[key] for run in done) for key in done[0]}
              for variant, done in runs.items()}
    stock, ours = median["stock"], median["spared"]
    print(f"\n`lockstep run` on {args.data or 'the bundled penguins'}, {args.cores} core(s), "
          f"median of {rounds} run(s) each, seconds:")
    print(f"  {'':<14} {'stock':>8} {'spared':>8} {'stock / spared':>15}")
    for key in stock:
        print(f"  {key:<14} {stock[key]:8.2f} {ours[key]:8.2f} {stock[key] / ours[key]:15.2f}")
    print(f"beam_fixed_costs: stock / spared Total = {stock['Total'] / ours['Total']:.2f}, "
          f"Beam stages = {stock['Beam stages'] / ours['Beam stages']:.2f}, process CPU = "
          f"{stock['process CPU'] / ours['process CPU']:.2f}")


if __name__ == "__main__":
    main()
