"""Model parallelism for a large id column (trainer_module/sharded_embedding.py): one table of
ROWS x 16 (a user id column, power-law ids) in the built-in model, split over the replicas
against whole on each, side by side, each in a fresh process on N emulated CPU replicas:

  rows        the table's rows; bytes with Adam's slots, all of it and on one replica
  step        seconds a global step (batch 256 a replica), split / mirrored
  peak RSS    the process's peak resident memory: split on N, mirrored on N, one device

A mirrored table whose copies would not fit in this machine's memory (more than half of it) is
not run: its line says what it would need.

Then the quality of keeping every value (--clicks): a generated click table (CLICK_ROWS rows: a
user id of CLICK_USERS values, power-law, an item id of 2,000, three numbers; clicked with a
probability from the user's own effect, the item's and the numbers), through `lockstep run`
three times on the same file, eval AUC side by side:

  every value   the default: each user its own row
  2,000 kept    data.max_vocabulary = 2000: the 2,000 most frequent, the rest one bucket
  hashed        data.columns = {user = "hashed"}: its 1,000 most frequent, the rest in 1,000
                hash buckets

usage: python benchmarks/embeddings.py [--rows 100000,1000000,10000000] [--replicas 1,2,4,8]
         [--steps 20] [--clicks] [--smoke]      (--rows "": the click table alone)
--smoke: 20,000 rows on 1 and 2 replicas, 4 steps; with --clicks, 20,000 rows of 2,000 users
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainer_module.table_plan import Table, block_sizes, megabytes, table_bytes

DIM = 16
PER_REPLICA = 256
CLICK_ROWS, CLICK_USERS = 500_000, 20_000
NUMERIC = [f"x{i}_xf" for i in range(8)]


def measure(rows: int, replicas: int, split: bool, steps: int) -> dict:
    """In this process (fresh, its replicas made first): train `steps` global steps, return the
    step seconds and the peak RSS."""
    from trainer_module import strategy as strategy_lib

    strategy_lib.configure_emulated_replicas(replicas)
    import numpy as np
    import tensorflow as tf

    from trainer_module import loop, model as model_lib, settings, warmup

    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    strategy = (tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        if replicas > 1 else tf.distribute.OneDeviceStrategy(devices[0]))
    batch = PER_REPLICA * replicas
    rng = np.random.default_rng(0)
    n = batch * 8
    users = np.minimum(rng.zipf(1.2, n) - 1, rows - 1).astype(np.int64)
    effect = rng.normal(0, 1, 1 << 16)[users % (1 << 16)]
    x = {k: rng.normal(0, 1, n).astype(np.float32) for k in NUMERIC}
    x["user_xf"] = users
    y = (effect + x["x0_xf"] + rng.normal(0, 1, n) > 0).astype(np.int64)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(
            PER_REPLICA, drop_remainder=True))
    with strategy.scope():
        # The pipeline's model (TrainerConfig's defaults), its table DIM wide.
        model = model_lib.tabular(NUMERIC, {"user_xf": rows}, 2, settings.CLASSIFICATION,
                                  settings.TrainerConfig(embedding_dim=DIM, seed=1),
                                  shards={"user_xf": replicas} if split else None)
        optimizer = tf.keras.optimizers.AdamW(warmup.WarmupSchedule(2e-3, 5, steps),
                                              weight_decay=3e-4)
    trainer = loop.SynchronousLoop(strategy, model, optimizer,
                                   model_lib.builtin_loss(settings.CLASSIFICATION), batch, dataset)
    trainer.train(2)  # traced, warmed
    tic = time.perf_counter()
    trainer.train(steps)
    seconds = (time.perf_counter() - tic) / steps
    return {"step": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3}


def run_child(rows: int, replicas: int, split: bool, steps: int) -> dict:
    cmd = [sys.executable, __file__, "--child", f"{rows},{replicas},{int(split)},{steps}"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def write_clicks(path: str, rows: int, users: int, seed: int = 0) -> None:
    """The click table (the module's docstring), as a CSV."""
    import numpy as np

    rng = np.random.default_rng(seed)
    user = np.minimum(rng.zipf(1.15, rows) - 1, users - 1)
    user = rng.permutation(users)[user]  # the frequent ones anywhere in the id range
    item = np.minimum(rng.zipf(1.3, rows) - 1, 1999)
    numbers = rng.normal(0, 1, (rows, 3))
    logit = (1.5 * rng.normal(0, 1, users)[user] + 0.7 * rng.normal(0, 1, 2000)[item]
             + numbers @ np.array([0.5, -0.3, 0.0]) - 1.0)
    clicked = rng.random(rows) < 1 / (1 + np.exp(-logit))
    with open(path, "w") as out:
        out.write("user,item,a,b,c,clicked\n")
        for start in range(0, rows, 100_000):
            end = min(start + 100_000, rows)
            out.write("".join(
                f"u{u},i{i},{x:.4f},{y:.4f},{z:.4f},{int(k)}\n" for u, i, (x, y, z), k in
                zip(user[start:end], item[start:end], numbers[start:end], clicked[start:end])))


def eval_auc(data: str, work: str, settings: str) -> float:
    """`lockstep run` on the click table with these settings (TOML); its eval AUC."""
    import re

    os.makedirs(work, exist_ok=True)
    config = os.path.join(work, "config.toml")
    with open(config, "w") as out:
        out.write(settings)
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "--data", data, "--label", "clicked",
           "--config", config, "--pipeline-root", os.path.join(work, "root"),
           "--serving-dir", os.path.join(work, "serving")]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=root,
                            env=dict(os.environ, PYTHONPATH=root))
    found = re.search(r"^Eval metrics: .*\bauc (\d\.\d+)", result.stdout, re.MULTILINE)
    if result.returncode or not found:
        sys.exit(f"failed: {' '.join(cmd)}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return float(found.group(1))


def clicks(smoke: bool) -> None:
    import tempfile

    rows, users = (20_000, 2_000) if smoke else (CLICK_ROWS, CLICK_USERS)
    work = tempfile.mkdtemp(prefix="embeddings-")
    data = os.path.join(work, "clicks.csv")
    write_clicks(data, rows, users)
    # Enough passes for a user's row to learn (a user is in ~rows / users rows).
    trainer = ("[trainer]\nepochs = 1\nmax_train_examples = 2000\n" if smoke else
               "[trainer]\nepochs = 4\nmax_train_examples = 0\n")
    kinds = {"every value": "", "2,000 kept": "[data]\nmax_vocabulary = 2000\n",
             "hashed": '[data]\ncolumns = {user = "hashed"}\n'}
    if smoke:  # two sides, not three: a run is 20 s here
        kinds.pop("hashed")
    auc = {name: eval_auc(data, os.path.join(work, str(i)), extra + trainer)
           for i, (name, extra) in enumerate(kinds.items())}
    print(f"\nclick table: {rows:,} rows, {users:,} users; eval AUC: "
          + ", ".join(f"{name} {value:.4f}" for name, value in auc.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="100000,1000000,10000000")
    parser.add_argument("--replicas", default="1,2,4,8")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", default="")
    parser.add_argument("--clicks", action="store_true")
    args = parser.parse_args()
    if args.child:
        rows, replicas, split, steps = (int(v) for v in args.child.split(","))
        print(json.dumps(measure(rows, replicas, bool(split), steps)))
        return
    sizes = [20_000] if args.smoke else [int(v) for v in args.rows.split(",") if v]  # "": none
    counts = [1, 2] if args.smoke else [int(v) for v in args.replicas.split(",")]
    steps = 4 if args.smoke else args.steps
    room = memory_bytes() // 2
    if sizes:
        print(f"one table of ROWS x {DIM} (Adam's slots with it), per-replica batch "
              f"{PER_REPLICA}, {steps} steps; step seconds and peak RSS, split over the replicas "
              "/ whole on each")
    for rows in sizes:
        one = run_child(rows, 1, False, steps)
        print(f"\n{Table('user', rows, DIM).words()}")
        print(f"  1 device: step {one['step']:.3f} s, peak RSS {one['peak_mb']:,.0f} MB")
        for replicas in [r for r in counts if r > 1]:
            split = run_child(rows, replicas, True, steps)
            replica = table_bytes(block_sizes(rows, replicas)[0], DIM)
            line = (f"  {replicas} replicas: {megabytes(replica)} a replica split; step split "
                    f"{split['step']:.3f} s, peak RSS split {split['peak_mb']:,.0f} MB "
                    f"({split['peak_mb'] / one['peak_mb']:.2f} x one device)")
            if table_bytes(rows, DIM) * replicas > room:
                line += (f"; mirrored not run: {megabytes(table_bytes(rows, DIM) * replicas)} of "
                         f"copies, more than half of this machine's {megabytes(memory_bytes())}")
            else:
                whole = run_child(rows, replicas, False, steps)
                line += (f"; mirrored: step {whole['step']:.3f} s, peak RSS "
                         f"{whole['peak_mb']:,.0f} MB ({whole['peak_mb'] / one['peak_mb']:.2f} x "
                         f"one device); split / mirrored step = "
                         f"{split['step'] / whole['step']:.2f}")
            print(line)
    if args.clicks or args.smoke:
        clicks(args.smoke)


if __name__ == "__main__":
    main()
