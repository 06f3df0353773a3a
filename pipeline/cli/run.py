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
    run.add_argument("--train-steps", type=int, help="at most N train steps (default: from the example budget)")
    run.add_argument("-v", "--verbose", action="store_true", help="log TFX and trainer progress")
    run.add_argument("--lock", help="the run lock (default: <pipeline root>/run.lock); a run that "
                                    "finds it held exits with status 3")
    run.add_argument("--wait", type=float, metavar="SECONDS",
                     help="wait this long for the lock (default: run.lock_wait_seconds, 0)")
    run.add_argument("--timeout-minutes", type=float,
                     help="stop the run with status 4 after this long (default: "
                          "run.timeout_minutes; 0: no limit)")
    from pipeline import orchestrators  # light: no TensorFlow

    here = orchestrators.names(runs_here=True)
    run.add_argument("--orchestrator", choices=here, default=orchestrators.LOCAL,
                     help="; ".join(f"{name}: {orchestrators.get(name).help}" for name in here))
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


def _say(line: str) -> None:
    print(line, flush=True)  # before the long run: seen at once, even through a pipe


def command(args) -> int:
    from pipeline.use_cases import local_run

    outcome = local_run.run(load_config(args, _overrides(args)), orchestrator=args.orchestrator,
                            force=args.force, verbose=args.verbose, lock=args.lock, say=_say)
    for line in outcome.lines():
        print(line)
    return 0
