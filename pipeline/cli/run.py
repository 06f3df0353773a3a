"""`lockstep run`: the whole pipeline here, with LocalDagRunner or, compiled, under kfp.local."""

from __future__ import annotations

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
    from pipeline.use_cases import LOCAL, ORCHESTRATORS  # light: no TensorFlow

    run.add_argument("--orchestrator", choices=ORCHESTRATORS, default=LOCAL,
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


def command(args) -> int:
    from pipeline import use_cases

    prepared = use_cases.prepare(load_config(args, _overrides(args)))
    for line in prepared.lines():
        print(line, flush=True)
    prepared = use_cases.check_drift(prepared)
    if prepared.drift:
        print(prepared.drift.line(), flush=True)
    unchanged = None if args.force else use_cases.nothing_new(prepared)
    if unchanged:
        print(unchanged)
        return 0
    log_file = use_cases.log_path(prepared.config)
    if not args.verbose:
        print(f"lockstep: library logs go to {log_file} (-v shows them here)", flush=True)
    outcome = use_cases.run(prepared, orchestrator=args.orchestrator, log_file=log_file,
                            verbose=args.verbose, lock=args.lock)
    print(outcome.report.describe(with_nodes=False))  # the components had their lines as they ran
    if outcome.page:
        print(f"Report: {outcome.page}")
    else:
        print(f"lockstep: the run report could not be written: {outcome.page_error}")
    print(f"Total: {outcome.seconds:.1f}s")
    return 0
