"""`lockstep verify`: does your model, with your loss and preprocessing, train synchronously right?"""

from __future__ import annotations

from pipeline.cli.common import add_config_arg, load_config
from pipeline.cli.usage import UsageError


def add_parser(sub) -> None:
    verify = sub.add_parser(
        "verify", help="check that N replicas make the update one device makes, on your model",
        description="Runs the pipeline up to Transform (cached, like a run), then trains your "
                    "model (trainer.model, trainer.loss, transform.preprocessing_fn) for a few "
                    "global steps on N emulated replicas and with Keras on one device on the "
                    "same global batches from the same weights, and prints the largest weight "
                    "difference beside how far the weights moved. Your trainer.precision, "
                    "accumulation_steps and jit_compile apply. Exit 0 within the tolerance, "
                    "1 beyond it.")
    add_config_arg(verify)
    verify.add_argument("--data", help="a CSV file or a directory of CSV files (default: data.path)")
    verify.add_argument("--label", help="the label column (default: data.label)")
    verify.add_argument("--pipeline-root", help="where artifacts and ML Metadata go")
    verify.add_argument("--replicas", type=int, default=2, help="emulated replicas (default 2)")
    verify.add_argument("--steps", type=int, default=3, help="global steps (default 3)")
    verify.add_argument("--workers", type=int, default=1,
                        help="run the replicas in this many worker processes on loopback "
                             "(MultiWorkerMirroredStrategy, one replica each, as on several "
                             "hosts); default 1: emulated replicas in one process")
    verify.add_argument("--optimizer", choices=("sgd", "run"), default="sgd",
                        help="sgd (default: a gradient off by a factor shows by that factor), or "
                             "run: the run's own optimizer and schedule (AdamW) over the steps")
    verify.set_defaults(func=command)


def _say(line: str) -> None:
    print(line, flush=True)


def command(args) -> int:
    from pipeline.use_cases import verification

    for flag, value, least in (("--replicas", args.replicas, 2), ("--steps", args.steps, 1),
                               ("--workers", args.workers, 1)):
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, got {value}")
    config = load_config(args, {"data.path": args.data, "data.label": args.label,
                                "paths.pipeline_root": args.pipeline_root})
    result = verification.verify(config, replicas=args.replicas, steps=args.steps,
                                 workers=args.workers, optimizer=args.optimizer, say=_say)
    for line in result.lines():
        print(line)
    return 0 if result.passed else 1
