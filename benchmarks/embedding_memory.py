"""Model parallelism's memory in a whole run: a table of IDS user ids, each in 2 rows (a number
and a click drawn from the user's own effect beside), through `lockstep run`, its large id
table split over REPLICAS emulated CPU replicas against one device, on the same global batch
(REPLICAS x 256) and steps, side by side:

  ingest      a first run (its Trainer one step) makes ExampleGen, StatisticsGen and Transform;
              the two runs after it find them cached and run the Trainer, Evaluator and Pusher
  Trainer     seconds, and the largest process's RSS while it ran (each process of the run
              sampled from /proc every 0.25 s, the Trainer's span read from the run's library
              log; upstream cached, that is the process the Trainer runs in)
  largest     the run's largest process at its peak (wait4's ru_maxrss): the Evaluator of the
              eval rows runs after the Trainer in the same process

`benchmarks/embeddings.py` measures the table alone (no input pipeline, Transform layer or
Evaluator); this is the run a user makes.

    python benchmarks/embedding_memory.py [--ids 10000000] [--replicas 8] [--steps 60] [--smoke]

--smoke: 2,000 ids on 2 replicas, 2 steps, every table split (`shard_embeddings_over = 0`).
The 10 M ids take about 15 minutes on 2 cores (the ingest 8 of them)."""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import REPO, process_tree

PER_REPLICA = 256
SAMPLING_INTERVAL = 0.25
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO \S+: Component (\w+) is "
                      r"(running|finished)\.")


def write_ids(path: Path, ids: int, seed: int = 0) -> None:
    """The id table: every user id in 2 rows, shuffled; a number; a click from the user's effect
    and the number."""
    import numpy as np

    rng = np.random.default_rng(seed)
    users = rng.permutation(np.repeat(np.arange(ids), 2))
    effect = rng.normal(0, 1.5, ids)
    x = rng.normal(0, 1, len(users))
    clicked = rng.random(len(users)) < 1 / (1 + np.exp(-(effect[users] + 0.8 * x - 0.5)))
    with open(path, "w") as out:
        out.write("user_id,x,clicked\n")
        for start in range(0, len(users), 500_000):
            end = start + 500_000
            out.write("".join(f"u{u},{v:.4f},{int(k)}\n" for u, v, k in
                              zip(users[start:end], x[start:end], clicked[start:end])))


def spans(library_log: str) -> dict[str, tuple[float, float]]:
    """{component: (start, end) in seconds since the epoch} from a run's library log (its
    'Component X is running.' and '... is finished.' lines, in local time)."""
    found: dict[str, list[float]] = {}
    for line in library_log.splitlines():
        match = LOG_LINE.match(line)
        if match:
            when = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            place = 0 if match.group(4) == "running" else 1
            found.setdefault(match.group(3), [float("nan")] * 2)[place] = (
                when + int(match.group(2)) / 1000)
    return {name: (start, end) for name, (start, end) in found.items()}


def peak_within(samples: list[tuple[float, int, int]], span: tuple[float, float]) -> int:
    """The largest RSS (bytes) any one process had in the samples (time, pid, rss) taken within
    `span`; 0 where none was."""
    start, end = span
    return max((rss for when, _, rss in samples if start <= when <= end), default=0)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(data: Path, root: Path, work: Path, trainer: dict) -> dict:
    """One `lockstep run` with these [trainer] settings: its wall seconds, stdout, each
    process's sampled RSS, the largest process's peak (bytes) and its components' spans."""
    work.mkdir(parents=True)
    config = work / "config.toml"
    config.write_text("[trainer]\n" + "".join(f"{k} = {v}\n" for k, v in trainer.items()))
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "--data", str(data), "--label",
           "clicked", "--pipeline-root", str(root), "--serving-dir", str(work / "serving"),
           "--config", str(config)]
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    samples: list[tuple[float, int, int]] = []
    tic = time.perf_counter()
    with open(work / "stdout", "w+") as out, open(work / "stderr", "w+") as err:
        process = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, text=True)
        done = threading.Event()

        def sample():
            while not done.wait(SAMPLING_INTERVAL):
                now = time.time()
                for pid in sorted(process_tree(process.pid)):
                    try:
                        samples.append((now, pid, _rss(pid)))
                    except (OSError, IndexError, ValueError):  # it exited while being read
                        pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        done.set()
        sampler.join()
        seconds = time.perf_counter() - tic
        out.seek(0), err.seek(0)
        stdout = out.read()
        if os.waitstatus_to_exitcode(status):
            sys.exit(f"failed: {' '.join(cmd)}\n{stdout[-2000:]}\n{err.read()[-3000:]}")
    library = re.search(r"library logs go to (\S+)", stdout)
    log = Path(library.group(1)).read_text() if library else ""
    return {"seconds": seconds, "stdout": stdout, "samples": samples,
            "largest": usage.ru_maxrss * 1024, "spans": spans(log)}


def trainer_figures(result: dict) -> tuple[float, int]:
    """(the Trainer's seconds, the largest process's RSS while it ran); exits if it did not run."""
    span = result["spans"].get("Trainer")
    if (span is None or not re.search(r"Trainer\s+executed", result["stdout"])
            or "resumed at" in result["stdout"]):
        sys.exit("the Trainer did not train from the start (cached, resumed?):\n"
                 + result["stdout"][-2000:])
    return span[1] - span[0], peak_within(result["samples"], span)


def gigabytes(value: int) -> str:
    return f"{value / 1e9:.2f} GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=10_000_000)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    extra = {}
    if args.smoke:
        args.ids, args.replicas, args.steps = 2_000, 2, 2
        extra = {"shard_embeddings_over": 0}  # a small table is kept whole by the default
    work = Path(tempfile.mkdtemp(prefix="embedding-memory-"))
    data = work / "ids.csv"
    write_ids(data, args.ids)
    batch = args.replicas * PER_REPLICA
    common = {"global_batch": batch, **extra}
    ingest = run(data, work / "root", work / "ingest",
                 {"emulate_replicas": args.replicas, "train_steps": 1, **common})
    print(f"id table: {args.ids:,} ids in {2 * args.ids:,} rows; ingest run "
          f"{ingest['seconds']:.0f} s, largest process {gigabytes(ingest['largest'])}")
    print(f"{args.steps} steps of global batch {batch}, inputs cached (work directory {work}):")
    sides = {}
    # Two seeds: the same job on another replica count would resume from the first's last
    # checkpoint (an elastic resume) and train no step.
    for seed, (name, replicas) in enumerate((("one device", 1),
                                              (f"split over {args.replicas}", args.replicas))):
        result = run(data, work / "root", work / name.replace(" ", "-"),
                     {"emulate_replicas": replicas, "train_steps": args.steps, "seed": seed,
                      **common})
        seconds, peak = trainer_figures(result)
        sides[name] = (peak, result["largest"])
        table = re.search(r"^Sharded tables: (.*)$", result["stdout"], re.M)
        print(f"  {name:<14} Trainer {seconds:5.1f} s, peak RSS in the Trainer {gigabytes(peak)}, "
              f"largest process {gigabytes(result['largest'])}"
              + (f"; {table.group(1)}" if table and replicas > 1 else ""))
    (one_peak, one_largest), (split_peak, split_largest) = sides.values()
    print(f"split / one device: peak RSS in the Trainer {split_peak / one_peak:.2f} x, largest "
          f"process {split_largest / one_largest:.2f} x (goal <= 1.5)")


if __name__ == "__main__":
    main()
