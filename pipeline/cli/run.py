"""`lockstep run`: the whole pipeline here, with LocalDagRunner or, compiled, under kfp.local."""

from __future__ import annotations

import os
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
    run.add_argument("--force", action="store_true",
                     help="run even when no new complete span arrived since the serving model")
    run.add_argument("--emulate-replicas", type=int, help="train on N emulated CPU replicas")
    run.add_argument("--train-steps", type=int, help="fixed train steps (default: from the example budget)")
    run.add_argument("-v", "--verbose", action="store_true", help="log TFX and trainer progress")
    run.add_argument("--lock", help="the run lock (default: <pipeline root>/run.lock); a run that "
                                    "finds it held exits with status 3")
    run.add_argument("--wait", type=float, metavar="SECONDS",
                     help="wait this long for the lock (default: run.lock_wait_seconds, 0)")
    run.add_argument("--timeout-minutes", type=float,
                     help="stop the run with status 4 after this long (default: "
                          "run.timeout_minutes; 0: no limit)")
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
        "run.lock_wait_seconds": args.wait, "run.timeout_minutes": args.timeout_minutes,
    }


def _watchdog(minutes: float):
    """After `minutes`, says so on the real stderr and ends the process with status 4 (the
    kernel releases the run lock). Started before the console redirects fd 2."""
    import threading

    from pipeline.cli import errors

    if not minutes:
        return None
    terminal = os.dup(2)

    def stop():
        os.write(terminal, (f"lockstep: error: the run took longer than {minutes:g} min "
                            "(run.timeout_minutes); stopped\n").encode())
        os._exit(errors.TIMED_OUT)

    timer = threading.Timer(minutes * 60, stop)
    timer.daemon = True
    timer.start()
    return timer


TREND_RUNS = 20  # runs in a report's trend


def _write_page(report, config, log_path: str) -> str | None:
    """The run's HTML report; a failure to write it is logged, not fatal (the run is done)."""
    from pipeline.reporting import page as report_page
    from pipeline.cli.report import report_directory
    from pipeline.local.console import Console

    try:
        with Console(log_path):  # matplotlib's and TensorFlow's chatter, to the run's log
            history = []
            if os.path.exists(config.metadata_path):  # the trend over past runs (local runs)
                from pipeline.reporting import metadata_store

                history = metadata_store.history(config, TREND_RUNS)
            return report_page.write(report, report_directory(config), history)
    except Exception as err:  # noqa: BLE001  the run's result stands without its page
        print(f"lockstep: the run report could not be written: {type(err).__name__}: {err}")
        return None


def _run_kfp_local(config, console):
    """Compiles the spec and runs it under kfp.local (pipeline/local/kfp_local.py), a line per task."""
    from pipeline.local import kfp_local

    console.line("lockstep: compiling, then running the spec under kfp.local, each task a "
                 "process of its own")

    def task_line(record):
        console.line(f"  {record.task:<20} {'done' if record.succeeded else 'FAILED':<7} "
                     f"{record.seconds:6.1f}s (start-up {record.start_seconds:.1f}s)")

    return kfp_local.run_config(config, on_task=task_line).report()


def command(args) -> int:
    from absl import logging as absl_logging

    from pipeline import preflight

    config = load_config(args, _overrides(args))
    data = preflight.check_local(config)
    decisions = preflight.decide(config, data)
    absl_logging.set_verbosity(absl_logging.INFO)  # all of it to the log file (or, -v, here)
    spans = f" of span(s) {', '.join(map(str, data.spans))}" if data.spans else ""
    task = f"{data.task} ({data.task_reason})"
    print(f"lockstep: {data.rows} rows from {len(data.files)} CSV file(s){spans}, label "
          f"'{config.data.label}', {len(data.columns) - 1} columns; task {task}", flush=True)
    for line in decisions.column_lines() + [decisions.gate_line()]:
        print(line, flush=True)
    drift = preflight.check_drift(config, data)  # Arrow only: before TensorFlow loads
    if drift:
        print(drift.line(), flush=True)
    unchanged = None if args.force else preflight.nothing_new(config, data)
    if unchanged:
        print(unchanged)
        return 0
    from pipeline.local import run_lock
    from pipeline.cli import errors
    from pipeline.local.console import Console

    tic = time.perf_counter()
    log_path = os.path.join(config.paths.pipeline_root, "logs",
                            time.strftime("run-%Y%m%dT%H%M%SZ.log", time.gmtime()))
    if not args.verbose:
        print(f"lockstep: library logs go to {log_path} (-v shows them here)", flush=True)
    lock = args.lock or run_lock.default_path(config.paths.pipeline_root)
    _watchdog(config.run.timeout_minutes)
    try:
        with run_lock.hold(lock, config.run.lock_wait_seconds), \
                Console(log_path, args.verbose) as console:
            if config.trainer.emulate_replicas > 1:
                # Before TensorFlow starts: the Trainer runs in this process.
                from trainer_module.strategy import configure_emulated_replicas

                configure_emulated_replicas(config.trainer.emulate_replicas)
            from pipeline.local import dag_runner

            if args.orchestrator == "kfp-local":
                report = _run_kfp_local(config, console)
            else:
                report = dag_runner.run(config, data.input_base, data.pattern, decisions)
    except Exception as err:  # noqa: BLE001  a component failed: its error, whatever it is
        if errors.status_of(err) is not None:
            raise
        lines = str(err).strip().splitlines()
        raise errors.PipelineFailed(f"pipeline run failed: {type(err).__name__}: "
                                    f"{lines[-1] if lines else ''}") from err
    report.task = task
    report.drift = drift.to_dict() if drift else {}
    print(report.describe(with_nodes=False))  # the components had their lines as they ran
    page = _write_page(report, config, log_path)
    if page:
        print(f"Report: {page}")
    print(f"Total: {time.perf_counter() - tic:.1f}s")
    return 0
