"""`lockstep run`: the whole pipeline here, with LocalDagRunner or, compiled, under kfp.local."""

from __future__ import annotations

import os
import sys
import time

from pipeline.cli.common import add_config_arg, load_config


def add_parser(sub) -> None:
    run = sub.add_parser("run", help="run the whole pipeline locally (LocalDagRunner)")
    add_config_arg(run)
    run.add_argument("--data", help="a CSV file or a directory of CSV files (default: bundled penguins)")
    run.add_argument("--label", help="the label column (default: species)")
    run.add_argument("--task", choices=["classification", "regression"],
                     help="override the task decided from the label column")
    run.add_argument("--pipeline-root", help="where artifacts and ML Metadata go")
    run.add_argument("--serving-dir", help="where blessed models are pushed, one version dir each")
    run.add_argument("--no-cache", action="store_true", help="execute every component again")
    run.add_argument("--emulate-replicas", type=int, help="train on N emulated CPU replicas")
    run.add_argument("--train-steps", type=int, help="fixed train steps (default: from the example budget)")
    run.add_argument("-v", "--verbose", action="store_true", help="log TFX and trainer progress")
    run.add_argument("--lock", help="a lock file: if another run holds it, skip this run (exit 0)")
    run.add_argument("--orchestrator", choices=["local", "kfp-local"], default="local",
                     help="local: TFX's LocalDagRunner (default); kfp-local: compile for Kubeflow "
                          "and run the spec under KFP's local orchestrator, each task a process")
    run.set_defaults(func=command)


def _overrides(args) -> dict:
    return {
        "data.path": args.data, "data.label": args.label, "data.task": args.task,
        "paths.pipeline_root": args.pipeline_root, "paths.serving_dir": args.serving_dir,
        "enable_cache": False if args.no_cache else None,
        "trainer.emulate_replicas": args.emulate_replicas,
        "trainer.train_steps": args.train_steps,
    }


def _lock(path: str | None):
    import contextlib

    from pipeline.local_schedule import run_lock

    return run_lock(path) if path else contextlib.nullcontext()


def _run_kfp_local(config, task: str, console):
    """Compiles the spec and runs it under kfp.local (pipeline/kfp_local.py), a line per task."""
    from pipeline import kfp_local

    console.line("lockstep: compiling, then running the spec under kfp.local, each task a "
                 "process of its own")

    def task_line(record):
        console.line(f"  {record.task:<20} {'done' if record.succeeded else 'FAILED':<7} "
                     f"{record.seconds:6.1f}s (start-up {record.start_seconds:.1f}s)")

    return kfp_local.run_config(config, task, on_task=task_line).report()


def command(args) -> int:
    from absl import logging as absl_logging

    from pipeline import data_check

    config = load_config(args, _overrides(args))
    data = data_check.check(config.data.path, config.data.label, config.data.missing_values,
                            config.data.span_pattern, config.data.span_window, config.data.task)
    absl_logging.set_verbosity(absl_logging.INFO)  # all of it to the log file (or, -v, here)
    for column in config.eval.slices:
        if column not in data.columns:
            from pipeline.config import ConfigError

            raise ConfigError(f"eval.slices: '{column}' is not a column of {config.data.path} "
                              f"(columns: {', '.join(data.columns)})")
    spans = f" of span(s) {', '.join(map(str, data.spans))}" if data.spans else ""
    task = f"{data.task} ({data.task_reason})"
    print(f"lockstep: {data.rows} rows from {len(data.files)} CSV file(s){spans}, label "
          f"'{config.data.label}', {len(data.columns) - 1} features; task {task}", flush=True)
    from pipeline.cli import errors
    from pipeline.console import Console
    from pipeline.local_schedule import Locked

    tic = time.perf_counter()
    log_path = os.path.join(config.paths.pipeline_root, "logs",
                            time.strftime("run-%Y%m%dT%H%M%SZ.log", time.gmtime()))
    if not args.verbose:
        print(f"lockstep: library logs go to {log_path} (-v shows them here)", flush=True)
    try:
        with _lock(args.lock), Console(log_path, args.verbose) as console:
            if config.trainer.emulate_replicas > 1:
                # Before TensorFlow starts: the Trainer runs in this process.
                from trainer_module.strategy import configure_emulated_replicas

                configure_emulated_replicas(config.trainer.emulate_replicas)
            from pipeline import local_runner

            if args.orchestrator == "kfp-local":
                report = _run_kfp_local(config, data.task, console)
            else:
                report = local_runner.run(config, data.input_base, data.pattern, data.task)
    except Locked as err:
        print(f"lockstep: {err}", file=sys.stderr)
        return 0
    except Exception as err:  # noqa: BLE001  a component failed: its error, whatever it is
        if errors.status_of(err) is not None:
            raise
        lines = str(err).strip().splitlines()
        raise errors.PipelineFailed(f"pipeline run failed: {type(err).__name__}: "
                                    f"{lines[-1] if lines else ''}") from err
    report.task = task
    print(report.describe(with_nodes=False))  # the components had their lines as they ran
    print(f"Total: {time.perf_counter() - tic:.1f}s")
    return 0
