"""What a wide table costs the Trainer before its first step: tracing, side by side in one run.

For each width, the built-in model over that many transformed numeric columns (and a few
vocabulary columns) is built and one host call of the synchronous loop (trainer_module/loop.py,
10 steps) is timed, which is almost all tracing: once with tf-keras left to Keras
(trainer_module/autograph_rules.py, what lockstep runs) and once with TensorFlow 2.16's own rules,
under which AutoGraph rewrote tf-keras' Layer.__call__ on every layer call while the loop itself
was converted. The loop is traced as written now (tf.function with autograph=False), so the two
sides differ only by Keras' conversion of its own layers' `call` (docs/performance.md). Each
measurement runs in a fresh process, in alternation, so neither inherits the other's traces.

usage: python benchmarks/trace_cost.py [--widths 20 200] [--repeats 2] [--smoke]
--smoke: 5 columns, once each way (does it run and print its table)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from harness import REPO


def _measure(width: int, rule: bool) -> float:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import time

    import tensorflow as tf

    from trainer_module import autograph_rules, loop, model as model_lib, tf_internals

    if not rule:  # TensorFlow's own rules, as before lockstep added tf_keras to them
        tf_internals.convert_again("tf_keras")
    assert autograph_rules.installed() == rule
    numeric = [f"num_{i}" for i in range(width)]
    categorical = {f"cat_{i}": 50 for i in range(4)}
    model = model_lib.tabular(numeric, categorical, 3, "classification")
    batch = 256
    features = {k: tf.random.normal([batch]) for k in numeric}
    features.update({k: tf.random.uniform([batch], 0, 50, tf.int64) for k in categorical})
    labels = tf.random.uniform([batch], 0, 3, tf.int64)
    dataset = tf.data.Dataset.from_tensors((features, labels)).repeat()
    strategy = tf.distribute.get_strategy()
    trainer = loop.SynchronousLoop(strategy, model, tf.keras.optimizers.Adam(0.01),
                           model_lib.builtin_loss("classification"), batch, dataset)
    tic = time.perf_counter()
    trainer.train(10)
    return time.perf_counter() - tic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[20, 200])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="5 columns, once each way")
    args = parser.parse_args()
    if args.smoke:
        args.widths, args.repeats = [5], 1
    if args.child:
        print(json.dumps(_measure(int(args.child[0]), args.child[1] == "1")))
        return 0
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    print(f"{'columns':>8} {'lockstep s':>11} {'tf 2.16 rules s':>16} {'ratio':>7}")
    for width in args.widths:
        times = {True: [], False: []}
        for _ in range(args.repeats):
            for rule in (True, False):
                out = subprocess.run([sys.executable, __file__, "--child", str(width),
                                      "1" if rule else "0"], env=env, check=True,
                                     capture_output=True, text=True).stdout
                times[rule].append(json.loads(out.strip().splitlines()[-1]))
        ours, theirs = statistics.median(times[True]), statistics.median(times[False])
        print(f"{width:>8} {ours:>11.2f} {theirs:>16.2f} {theirs / ours:>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
