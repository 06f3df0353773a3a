"""The compiled spec under kfp.local (each task a process, as each is a pod on Kubeflow) beside
`lockstep run` (LocalDagRunner, one process) on the same data, in one run; and the same spec
with TFX's stock task command, to show what the lean task start (components/entrypoint.py) saves.

Prints, per task, start-up (process start to the executor's Do) and work seconds, and the wall
time ratio kfp-local / local (goal <= 2.0). Each variant runs in a fresh process and directory.
usage: python benchmarks/kfp_local.py [--data PATH --label COLUMN] [--config TOML] [--work DIR]
                                     [--smoke]
--config: a `lockstep run` config, for both runs (its hook code's directory goes on PYTHONPATH
for the stock task command too); --work: keep the runs there (DIR/local, DIR/kfp: each a
pipeline_root, a serving directory and stdout.txt, the run's output), else in a fresh temporary
directory. --smoke: the per-task split of lockstep's own task command read from the
`--orchestrator kfp-local` run's task lines instead of a second run of the spec with it, and TFX's
stock task command on the first task only, CsvExampleGen (does it run and print its table, both
sides: 67 s of the smoke's 242 s went to the stock command on the 7 tasks before the Trainer).
tests/test_kfp_local.py smokes it on examples/wide_deep and checks the kfp-local run it makes:
the one kfp.local run of the suite.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, timed_output

STOCK_COMMAND = ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]
_ABSL_TIME = re.compile(r"^I(\d{4}) (\d\d:\d\d:\d\d\.\d+) .*\] Starting executor")
# --smoke: TFX's stock task command on the first task only (every other runs only with lockstep's
# command, in the kfp-local run).
SMOKE_STOCK_TASKS = ("CsvExampleGen",)
_TASK_LINE = re.compile(r"^  (\S+)\s+done\s+([\d.]+)s \(start-up ([\d.]+)s\)$", re.M)


def _stock_do_began(log: str, year: int) -> float | None:
    """TFX's own entrypoint has no start marker; its absl line 'Starting executor' has a time."""
    for line in log.splitlines():
        match = _ABSL_TIME.match(line)
        if match:
            when = datetime.datetime.strptime(f"{year}{match.group(1)} {match.group(2)}",
                                              "%Y%m%d %H:%M:%S.%f")
            return when.timestamp()
    return None


def _keep_only(docs: list, kept: tuple[str, ...]) -> None:
    """Takes every task but `kept` (and what they read from) out of the spec's DAG."""
    tasks = docs[0]["root"]["dag"]["tasks"]

    def upstream(t: dict) -> set[str]:
        inputs = [*t.get("inputs", {}).get("artifacts", {}).values(),
                  *t.get("inputs", {}).get("parameters", {}).values()]
        return set(t.get("dependentTasks", [])) | {
            i.get(key, {}).get("producerTask") for i in inputs
            for key in ("taskOutputArtifact", "taskOutputParameter")}

    needed = set(kept)
    while more := {u for name in needed for u in upstream(tasks[name]) if u} - needed:
        needed |= more
    for name in set(tasks) - needed:
        del tasks[name]


def _run_spec(spec: Path, root: Path, command: list[str] | None,
              kept: tuple[str, ...] = ()) -> tuple[float, list[dict]]:
    """Wall seconds of kfp.local over the spec (its task command swapped if given; only the
    `kept` tasks and what they read from, if given) and the tasks."""
    import yaml

    from pipeline.local import kfp_local

    docs = list(yaml.safe_load_all(spec.read_text()))
    if kept:
        _keep_only(docs, kept)
    if command:
        for executor in docs[0]["deploymentSpec"]["executors"].values():
            executor["container"]["command"] = command
    variant = root / "pipeline.yaml"
    root.mkdir(parents=True)
    variant.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    tic = time.perf_counter()
    run = kfp_local.run(str(variant), str(root / "root"))
    wall = time.perf_counter() - tic
    tasks = []
    for t in run.tasks:
        start, work = t.start_seconds, t.work_seconds
        if command:  # the stock entrypoint: split by its absl line instead
            began = _stock_do_began(Path(t.log).read_text(), datetime.date.today().year)
            if began is not None:
                start, work = began - t.started_at, t.seconds - (began - t.started_at)
        tasks.append({"task": t.task, "start": start, "work": work})
    return wall, tasks


def _printed_tasks(stdout: str) -> list[dict]:
    """The tasks as _run_spec gives them, from the task lines `lockstep run --orchestrator
    kfp-local` prints as each ends ("  Trainer  done  12.3s (start-up 4.5s)")."""
    tasks = [{"task": task, "start": float(start), "work": float(seconds) - float(start)}
             for task, seconds, start in _TASK_LINE.findall(stdout)]
    if not tasks:
        sys.exit(f"no task lines in the kfp-local run's output:\n{stdout[-3000:]}")
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", help="default: the config's, else the bundled penguins")
    parser.add_argument("--label", help="default: the config's, else species")
    parser.add_argument("--config", type=Path, help="a lockstep config, for both runs")
    parser.add_argument("--work", type=Path, help="keep the runs here (default: a temporary one)")
    parser.add_argument("--smoke", action="store_true",
                        help="the spec run once each way")
    args = parser.parse_args()
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    work = (args.work or Path(tempfile.mkdtemp(prefix="lockstep-bench-kfp-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    common = [*(["--config", args.config.resolve()] if args.config else []),
              *(["--data", Path(args.data).resolve()] if args.data else []),
              *(["--label", args.label] if args.label else [])]

    def places(name):
        return ["--pipeline-root", work / name / "pipeline_root",
                "--serving-dir", work / name / "serving"]

    local, printed = timed_output([sys.executable, "-m", "pipeline.cli", "run", *common,
                                   *places("local")], work)
    (work / "local" / "stdout.txt").write_text(printed)
    print(f"lockstep run (LocalDagRunner):        {local:6.1f}s wall", flush=True)
    ours, printed = timed_output([sys.executable, "-m", "pipeline.cli", "run", "--orchestrator",
                                  "kfp-local", *common, *places("kfp")], work)
    (work / "kfp" / "stdout.txt").write_text(printed)
    print(f"lockstep run --orchestrator kfp-local: {ours:6.1f}s wall", flush=True)

    # Per-task split, ours and with TFX's stock task command, on the spec compiled above.
    spec = work / "kfp/pipeline_root/kfp-local/pipeline.yaml"
    sys.path.insert(0, str(REPO))
    if args.config:  # its hooks' directory, as `lockstep run` puts it on the tasks' path
        from trainer_module.hooks import add_code_path

        add_code_path(args.config.resolve().parent)
    if args.smoke:  # the run above already ran the spec with lockstep's task command
        lean = _printed_tasks(printed)
    else:
        _, lean = _run_spec(spec, work / "lean", None)
    stock_wall, stock = _run_spec(spec, work / "stock", STOCK_COMMAND,
                                  SMOKE_STOCK_TASKS if args.smoke else ())
    by_task = {t["task"]: t for t in stock}
    print(f"\n{'task':<20} {'start-up':>9} {'work':>7}   {'stock start-up':>14} {'work':>7}")
    for a, b in ((a, by_task.get(a["task"])) for a in lean):
        theirs = f"{b['start']:13.1f}s {b['work']:6.1f}s" if b else f"{'-':>14} {'-':>7}"
        print(f"{a['task']:<20} {a['start']:8.1f}s {a['work']:6.1f}s   {theirs}")
    both = [a for a in lean if a["task"] in by_task]
    total = lambda tasks, key: sum(t[key] for t in tasks)  # noqa: E731
    print(f"{'sum':<20} {total(both, 'start'):8.1f}s {total(both, 'work'):6.1f}s   "
          f"{total(stock, 'start'):13.1f}s {total(stock, 'work'):6.1f}s"
          + ("  (the tasks both ran)" if len(both) < len(lean) else ""))
    print(f"\nkfp-local / local = {ours / local:.2f}  (goal <= 2.0); with TFX's stock task command "
          f"the tasks alone took {stock_wall:.1f}s")
    (work / "result.json").write_text(json.dumps(
        {"local": local, "kfp_local": ours, "lean": lean, "stock": stock}, indent=2))


if __name__ == "__main__":
    main()
