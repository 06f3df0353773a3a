"""lockstep at real sizes, beside stock TFX, in one run on this machine.

1. A deterministic synthetic CSV shaped like real tabular data: 24 columns (10 float and 4
   integer measurements, 3 0/1 flags, 6 string columns with 3 to 5,000 values, a 3-class string
   label that depends on them), about 5 % of cells missing (empty), in 4 files.
2. Stages, rows/s side by side: lockstep's CsvExampleGen -> StatisticsGen -> SchemaGen ->
   Transform, the nodes `lockstep run` builds (its own ExampleGen, StatisticsGen and Transform),
   and stock TFX's CsvExampleGen -> StatisticsGen -> SchemaGen -> Transform with the same
   preprocessing_fn, each pipeline in a fresh process with LocalDagRunner and its defaults
   (stock Transform computes pre- and post-transform statistics and writes transformed examples;
   lockstep's Transform analyzes only: StatisticsGen has the statistics and the Trainer applies
   the transform graph as it reads).
3. The whole `lockstep run` at the --full sizes: wall time and peak RSS (of the largest process
   among it and the processes it waited for; and sampled, the proportional set sizes summed over
   its process tree, which is what counts when Beam runs worker processes), and how peak RSS grows with the rows.

A child's peak RSS (`ru_maxrss` from wait4) starts at its parent's: Linux records the high-water
mark of the address space a child leaves at exec, which after fork or vfork is the parent's. So
this script keeps itself small: it writes the CSVs in a subprocess (pandas at 1M rows peaks at
2.1 GB, which every later run then reported as its own) and prints its own peak beside the runs'.

usage: python benchmarks/scale.py [--rows 300000] [--full 100000 1000000] [--skip-stock]
                                  [--compare-multiprocess] [--smoke]
--smoke: 500 rows of 12 columns (each side's Transform takes about half what it takes on 24), the
stages on both sides (does it run and print its table); no whole run: whole_run.py's smoke times
one through the same `_run`
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness import REPO, process_tree

LABEL = "label"
STAGES = ("CsvExampleGen", "StatisticsGen", "Transform")
SAMPLING_INTERVAL = 0.2  # seconds between samples of a run's memory (_run), at least
SAMPLING_SHARE = 0.05  # at most this share of the time between samples goes to taking one
CARDINALITIES = (3, 10, 50, 300, 1000, 5000)


def make_csv(directory: Path, rows: int, files: int = 4, seed: int = 0, width: int = 24) -> None:
    """`width` columns with the label: of the features about 10/23 floats, 4/23 integer counts,
    3/23 0/1 flags and 6/23 strings (their cardinalities cycling 3, 10, 50, 300, 1000, 5000); the
    label depends on num_0, num_1, count_1, cat_10 and cat_3. At width 24 the bytes are those the
    benchmarks measured before `width` existed."""
    import numpy as np
    import pandas as pd

    features = width - 1
    floats, counts, flags = (max(2, round(features * share / 23)) for share in (10, 4, 3))
    strings = features - floats - counts - flags
    if strings < 2:
        raise ValueError(f"width {width} is too narrow (at least 11 columns)")
    rng = np.random.default_rng(seed)
    cols = {}
    for i in range(floats):
        cols[f"num_{i}"] = rng.normal(i, 1 + i, rows).round(4)
    for i in range(counts):
        cols[f"count_{i}"] = rng.poisson(3 + 10 * i, rows)
    for i in range(flags):
        cols[f"flag_{i}"] = rng.integers(0, 2, rows)
    for i in range(strings):
        values = CARDINALITIES[i % len(CARDINALITIES)]
        ranks = np.minimum(rng.zipf(1.3, rows), values) - 1
        cycle = i // len(CARDINALITIES)
        cols[f"cat_{values}" + (f"_{cycle}" if cycle else "")] = np.char.add("v", ranks.astype(str))
    score = (cols["num_0"] - cols["num_1"] / 2 + (cols["count_1"] > 13) * 1.5
             + (cols["cat_10"] == "v0") - (cols["cat_3"] == "v1") + rng.normal(0, 0.7, rows))
    label = np.where(score > 1.0, "high", np.where(score > -1.0, "mid", "low"))
    missing = rng.random((rows, len(cols))) < 0.05
    # Column by column, in types that print as Python's objects did (an object frame of
    # rows x width Python objects would take gigabytes at 200 columns).
    frame = pd.DataFrame({name: pd.Series(values).astype("Int64" if values.dtype.kind == "i"
                                                         else values.dtype).mask(missing[:, j])
                          for j, (name, values) in enumerate(cols.items())})
    frame[LABEL] = label
    directory.mkdir(parents=True, exist_ok=True)
    for index, part in enumerate(np.array_split(np.arange(rows), files)):
        frame.iloc[part].to_csv(directory / f"part-{index}.csv", index=False)


def _stage_pipeline(kind: str, data: str, root: str) -> None:
    """Runs ExampleGen -> StatisticsGen -> SchemaGen -> Transform here, with LocalDagRunner.

    ours: the nodes `lockstep run` builds (pipeline/definition.py): lockstep's CsvExampleGen,
    StatisticsGen and Transform (Transform reads the schema ExampleGen writes, and analyzes
    only), TFX's SchemaGen; imported as a run imports them (`components` first: TFX's component
    catalogue stays unloaded). stock: TFX's four components with their defaults, through
    `tfx.v1`, as a user of stock TFX writes them."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    if kind == "ours":
        from components.csv_example_gen import CsvExampleGen
        from components.example_gen_spec import ExampleGenSpec
        from components.csv_format import DEFAULT_MISSING_VALUES
        from components.statistics_gen import StatisticsGen
        from components.transform import Transform
        from pipeline.definition import TRANSFORM_SETTINGS
        from tfx.components.schema_gen.component import SchemaGen
    else:
        from tfx import v1 as tfx
    from tfx.orchestration import metadata, pipeline as tfx_pipeline
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner
    from tfx.proto import example_gen_pb2

    from trainer_module.settings import CLASSIFICATION
    from trainer_module.custom_config import TransformSpec

    output = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)]))
    custom_config = TransformSpec(LABEL, CLASSIFICATION).to_custom_config()
    preprocessing_fn = "trainer_module.preprocessing.preprocessing_fn"
    if kind == "ours":
        example_gen = CsvExampleGen(input_base=data,
                                    spec=ExampleGenSpec(LABEL, DEFAULT_MISSING_VALUES),
                                    output_config=output)
        statistics = StatisticsGen(examples=example_gen.outputs["examples"])
        schema = SchemaGen(statistics=statistics.outputs["statistics"], infer_feature_shape=False)
        transform = Transform(examples=example_gen.outputs["examples"],
                              schema=example_gen.outputs["schema"],
                              preprocessing_fn=preprocessing_fn, custom_config=custom_config,
                              **TRANSFORM_SETTINGS)
    else:
        example_gen = tfx.components.CsvExampleGen(input_base=data, output_config=output)
        statistics = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
        schema = tfx.components.SchemaGen(statistics=statistics.outputs["statistics"],
                                          infer_feature_shape=False)
        transform = tfx.components.Transform(
            examples=example_gen.outputs["examples"], schema=schema.outputs["schema"],
            preprocessing_fn=preprocessing_fn, custom_config=custom_config)
    metadata_path = os.path.join(root, "metadata.sqlite")
    pipeline = tfx_pipeline.Pipeline(
        pipeline_name=f"scale-{kind}", pipeline_root=root, enable_cache=False,
        components=[example_gen, statistics, schema, transform],
        metadata_connection_config=metadata.sqlite_metadata_connection_config(metadata_path))
    LocalDagRunner().run(pipeline)

    from ml_metadata import metadata_store

    store = metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(metadata_path))
    seconds = {}
    for execution in store.get_executions():
        node = next((c.name.split(".", 1)[-1] for c in store.get_contexts_by_execution(execution.id)
                     if c.type == "node"), execution.type)
        seconds[node] = (execution.last_update_time_since_epoch
                         - execution.create_time_since_epoch) / 1000
    print("SECONDS " + json.dumps(seconds))


def _run(cmd, cwd, log: Path | None = None) -> tuple[float, float, float, str]:
    """(wall seconds, peak RSS in GB of it and what it waited for, peak of the memory summed over
    its process tree (_tree_rss: PSS), stdout) of one command; its stderr goes to `log` if given.
    The two peaks differ when it runs worker processes: ru_maxrss is the largest single process's.

    The tree is sampled every 0.2 s, or less often, so that taking samples fills at most 1/20 of
    the time (SAMPLING_SHARE): to give a PSS the kernel walks the process's page tables, 16 to 23
    ms a GB of a TensorFlow process here, holding that process's memory map lock meanwhile. At a
    fixed 0.2 s, a `lockstep run` (three processes, 2 GB) cost its sampler a fifth of a core."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    tic = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, \
            (open(log, "w+") if log else tempfile.TemporaryFile("w+")) as err:
        process = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        tree_peak, done = [0], threading.Event()

        def sample():
            interval = SAMPLING_INTERVAL
            while not done.wait(interval):
                tic = time.perf_counter()
                tree_peak[0] = max(tree_peak[0], _tree_rss(process.pid))
                interval = max(SAMPLING_INTERVAL, (time.perf_counter() - tic) / SAMPLING_SHARE)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        done.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - tic
        out.seek(0), err.seek(0)
        stdout = out.read()
        if process.returncode:
            sys.exit(f"failed: {' '.join(map(str, cmd))}\n{err.read()[-3000:]}")
    return seconds, usage.ru_maxrss / 1e6, tree_peak[0] / 1e9, stdout


def _tree_rss(root: int) -> int:
    """The memory in bytes of a process and all its descendants, from /proc (Linux): each one's
    proportional set size (PSS: a page shared by n processes counts 1/n in each), so the pages a
    run shares with its forks (the worker lane, the serving check) count once; RSS where PSS
    cannot be read (/proc/PID/smaps_rollup: Linux 4.14). Only the tree's own processes are
    weighed (harness.process_tree): a PSS is a walk of its page tables."""
    total = 0
    for pid in process_tree(root):
        try:
            total += _pss(pid)
        except (OSError, IndexError, ValueError):  # it exited while being read
            pass
    return total


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except PermissionError:
        pass
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _make_csv(directory: Path, rows: int, width: int = 24) -> None:
    """make_csv in a subprocess, so this process stays small (see the module docstring)."""
    _run([sys.executable, __file__, "--make-csv", str(directory), str(rows), str(width)],
         directory.parent)


def _stages(kind: str, data: Path, work: Path) -> dict[str, float]:
    _, _, _, stdout = _run([sys.executable, __file__, "--stage", kind, str(data),
                         str(work / f"stage-{kind}")], work)
    line = next(x for x in stdout.splitlines() if x.startswith("SECONDS "))
    seconds = json.loads(line[len("SECONDS "):])
    return {stage: seconds[stage] for stage in STAGES}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=300_000, help="rows for the stage comparison")
    parser.add_argument("--full", type=int, nargs="*", default=[100_000, 1_000_000],
                        help="row counts for the whole pipeline (none: skip)")
    parser.add_argument("--skip-stock", action="store_true")
    parser.add_argument("--compare-multiprocess", action="store_true",
                        help="also run the largest --full size with Beam's multi-process direct "
                             "runner on every core, and print the ratio")
    parser.add_argument("--smoke", action="store_true",
                        help="500 rows of 12 columns, the stages only")
    parser.add_argument("--stage", nargs=3, metavar=("KIND", "DATA", "ROOT"), help=argparse.SUPPRESS)
    parser.add_argument("--make-csv", nargs=3, metavar=("DIR", "ROWS", "WIDTH"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    width = 24  # the CSVs' columns, the label included
    if args.smoke:
        args.rows, args.full, width = 500, [], 12
    if args.stage:
        _stage_pipeline(*args.stage)
        return
    if args.make_csv:
        make_csv(Path(args.make_csv[0]), int(args.make_csv[1]), width=int(args.make_csv[2]))
        return
    work = Path(tempfile.mkdtemp(prefix="lockstep-scale-"))
    print(f"work directory: {work}", flush=True)
    if args.rows:
        data = work / f"data-{args.rows}"
        _make_csv(data, args.rows, width)
        ours = _stages("ours", data, work)
        stock = None if args.skip_stock else _stages("stock", data, work)
        print(f"\nStages on {args.rows} rows x {width} columns (rows/s; stock / lockstep "
              "seconds):")
        for stage in STAGES:
            line = f"  {stage:<14} lockstep {args.rows / ours[stage]:9,.0f} rows/s ({ours[stage]:6.1f}s)"
            if stock:
                line += (f"   stock {args.rows / stock[stage]:9,.0f} rows/s ({stock[stage]:6.1f}s)"
                         f"   speed-up x{stock[stage] / ours[stage]:.1f}")
            print(line)
        if stock:
            total_ours, total_stock = sum(ours.values()), sum(stock.values())
            print(f"  ExampleGen speed-up x{stock['CsvExampleGen'] / ours['CsvExampleGen']:.1f} "
                  "(goal >= 10)")
            print(f"  ExampleGen + StatisticsGen + Transform: lockstep {total_ours:.1f}s, stock "
                  f"{total_stock:.1f}s, speed-up x{total_stock / total_ours:.2f} (goal >= 2.5)",
                  flush=True)
    peaks = {}
    for rows in args.full:
        data = work / f"data-{rows}"
        if not data.exists():
            _make_csv(data, rows, width)
        seconds, peak, tree, stdout = _run(
            [sys.executable, "-m", "pipeline.cli", "run", "--data", str(data), "--label", LABEL,
             "--pipeline-root", str(work / f"run-{rows}/root"),
             "--serving-dir", str(work / f"run-{rows}/serving")], work)
        peaks[rows] = peak
        trainer = next((x for x in stdout.splitlines() if x.startswith("Trainer:")), "")
        blessed = next((x for x in stdout.splitlines() if x.startswith("Blessed:")), "")
        print(f"\nWhole pipeline on {rows} rows: {seconds / 60:.1f} min wall, peak RSS "
              f"{peak:.2f} GB (process tree's PSS summed: {tree:.2f} GB)\n  {trainer}\n  {blessed}",
              flush=True)
    if args.compare_multiprocess and args.full:
        rows = max(args.full)
        config = work / "multiprocess.toml"
        config.write_text(f'beam_args = ["--direct_num_workers={os.cpu_count()}", '
                          '"--direct_running_mode=multi_processing"]\n')
        seconds, peak, tree, _ = _run(
            [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config), "--data",
             str(work / f"data-{rows}"), "--label", LABEL,
             "--pipeline-root", str(work / f"mp-{rows}/root"),
             "--serving-dir", str(work / f"mp-{rows}/serving")], work)
        print(f"\nWhole pipeline on {rows} rows with {os.cpu_count()} Beam worker processes: "
              f"{seconds / 60:.1f} min wall, peak RSS {peak:.2f} GB of the largest process, "
              f"{tree:.2f} GB of PSS summed over the process tree", flush=True)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"\n(this script's own peak RSS, a floor under every figure above: {own:.2f} GB)")
    if len(peaks) > 1:
        small, large = min(peaks), max(peaks)
        print(f"\nPeak RSS x{peaks[large] / peaks[small]:.2f} for x{large / small:g} rows "
              "(goal: at 1 M rows <= 1.5x that at 100 k, and <= 3 GB)")


if __name__ == "__main__":
    main()
