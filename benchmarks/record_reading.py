"""One epoch of the Trainer's record reading, two ways side by side on the same GZIP TFRecords:

  per record  a parallel interleave over the files that hands over one record at a time (what
              the input pipeline did before);
  in blocks   trainer_module.input_pipeline.read_records: each file's reader hands over
              READ_BLOCK records at a time, unbatched after the interleave.

Both then shuffle (10,000 records) and batch, as the training input does. Each is timed three
times, interleaved, keeping the best (noisy machines). Prints seconds per epoch and the ratio.
usage: python benchmarks/record_reading.py [--rows 240000] [--files 8] [--smoke]
--smoke: 2,000 records in 2 files (does it run and print its table)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from trainer_module import input_pipeline


def write_files(directory: str, rows: int, files: int) -> list[str]:
    """Records of about the size of a 20-column tf.Example (~500 bytes), spread over files."""
    paths = [os.path.join(directory, f"part-{i:05d}.gz") for i in range(files)]
    payload = bytes(range(256)) * 2
    for i, path in enumerate(paths):
        with tf.io.TFRecordWriter(path, options="GZIP") as writer:
            for row in range(i, rows, files):
                writer.write(row.to_bytes(8, "little") + payload)
    return paths


def per_record(files: list[str]) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
        cycle_length=tf.data.AUTOTUNE, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def in_blocks(files: list[str]) -> tf.data.Dataset:
    return input_pipeline.read_records(tf.data.Dataset.from_tensor_slices(files), "GZIP")


def epoch_seconds(records: tf.data.Dataset) -> tuple[float, int]:
    ds = records.shuffle(10_000, seed=0).batch(256)
    tic = time.perf_counter()
    rows = sum(int(tf.shape(batch)[0]) for batch in ds)
    return time.perf_counter() - tic, rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=240_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="2,000 records in 2 files")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.files = 2000, 2
    files = write_files(tempfile.mkdtemp(), args.rows, args.files)
    best = {"per record": float("inf"), "in blocks": float("inf")}
    for _ in range(3):
        for name, read in (("per record", per_record), ("in blocks", in_blocks)):
            seconds, rows = epoch_seconds(read(files))
            assert rows == args.rows, (name, rows)
            best[name] = min(best[name], seconds)
    print(f"{args.rows:,} records in {args.files} GZIP files, {os.cpu_count()} cores; "
          f"one epoch, shuffled and batched by 256")
    for name, seconds in best.items():
        print(f"  {name:<11} {seconds:6.2f} s")
    print(f"per record / in blocks = {best['per record'] / best['in blocks']:.1f}")


if __name__ == "__main__":
    main()
