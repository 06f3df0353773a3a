"""What the Trainer's input costs before and between its steps, side by side in one run:

  mask    the labeled rows kept by a boolean_mask a feature (lockstep before) against one gather
          a feature at the labeled rows' places (`input_pipeline._labeled`): the seconds to
          trace the parse map of a table of W features (loans: 160 transformed features);
  scores  the validation rows read through a new iterator at every score (before) against read
          once and kept (`early_stopping.validation_loss`): the seconds of K scores.

Both on generated TFRecords of W float features and a label that some rows lack; each side
alternates with the other `--repeats` times and the medians are printed with their ratio. A real
run's map also holds the transform graph, so its per-iterator cost is larger than here (loans'
53 columns: 0.2 s a score, 14 scores a run).

usage: python benchmarks/input_traces.py [--width 160] [--rows 4000] [--scores 14]
         [--repeats 3] [--smoke]
--smoke: 20 features, 400 rows, 3 scores, once each way (does it run and print its table)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from trainer_module import early_stopping, input_pipeline


def _write(path: str, width: int, rows: int) -> dict:
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for i in range(rows):
            example = tf.train.Example()
            for j in range(width):
                example.features.feature[f"f{j}"].float_list.value.append(rng.normal())
            example.features.feature["y"].int64_list.value.append(-1 if i % 7 == 0 else i % 3)
            writer.write(example.SerializeToString())
    return {**{f"f{j}": tf.io.FixedLenFeature([], tf.float32) for j in range(width)},
            "y": tf.io.FixedLenFeature([], tf.int64)}


def _masked(parsed: dict, label, keep):
    return ({k: tf.boolean_mask(v, keep) for k, v in parsed.items()},
            tf.boolean_mask(label, keep))


def _dataset(path: str, spec: dict, select) -> tf.data.Dataset:
    def parse(records):
        parsed = tf.io.parse_example(records, spec)
        label = parsed.pop("y")
        return select(parsed, label, label >= 0)

    return (tf.data.TFRecordDataset(path, compression_type="GZIP").batch(512)
            .map(parse).with_options(input_pipeline.untuned()))


def _trace_seconds(path, spec, select) -> float:
    tic = time.perf_counter()
    _dataset(path, spec, select)  # a map traces its function where it is made
    return time.perf_counter() - tic


def _scores_seconds(path, spec, scores: int, kept: bool) -> float:
    dataset = _dataset(path, spec, input_pipeline._labeled)  # noqa: SLF001  the one measured
    inputs = {k: tf.keras.Input(shape=(), name=k) for k in spec if k != "y"}
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(3)(tf.stack(list(inputs.values()), 1)))
    xent = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    if kept:
        score = early_stopping.validation_loss(model, xent, dataset)
    else:
        def score():  # as before: every score a new iterator, tf.data's rewrites again
            return sum(float(tf.reduce_sum(xent(y, model(x)))) for x, y in dataset)
    tic = time.perf_counter()
    for _ in range(scores):
        score()
    return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--scores", type=int, default=14)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.width, args.rows, args.scores, args.repeats = 20, 400, 3, 1
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "rows.gz")
        spec = _write(path, args.width, args.rows)
        _trace_seconds(path, spec, _masked)  # TensorFlow's first-use costs, on neither side
        _scores_seconds(path, spec, 1, kept=True)
        traces = {"mask": [], "gather": []}
        scores = {"new iterator": [], "kept": []}
        for _ in range(args.repeats):
            traces["mask"].append(_trace_seconds(path, spec, _masked))
            traces["gather"].append(_trace_seconds(path, spec, input_pipeline._labeled))  # noqa: SLF001
            scores["new iterator"].append(_scores_seconds(path, spec, args.scores, kept=False))
            scores["kept"].append(_scores_seconds(path, spec, args.scores, kept=True))
    med = {k: statistics.median(v) for k, v in {**traces, **scores}.items()}
    print(f"input_traces: {args.width} features, {args.rows} rows, {args.scores} scores, "
          f"medians of {args.repeats}")
    print(f"  parse map trace: boolean_mask a feature {med['mask']:.3f} s, one gather a feature "
          f"{med['gather']:.3f} s; mask / gather = {med['mask'] / med['gather']:.2f}")
    print(f"  {args.scores} scores: new iterator each {med['new iterator']:.3f} s, read once and "
          f"kept {med['kept']:.3f} s; new / kept = {med['new iterator'] / med['kept']:.2f}")


if __name__ == "__main__":
    main()
