"""The `lockstep` command line. Heavy imports happen inside each command, after the environment
is set (legacy Keras, quiet TensorFlow), so `lockstep --help` is instant."""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _fail(message: str, status: int) -> int:
    print(f"lockstep: error: {message}", file=sys.stderr)
    return status


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML or YAML config file (see README); flags override it")


def _run_overrides(args) -> dict:
    return {
        "data.path": args.data, "data.label": args.label,
        "paths.pipeline_root": args.pipeline_root, "paths.serving_dir": args.serving_dir,
        "enable_cache": False if args.no_cache else None,
        "trainer.emulate_replicas": args.emulate_replicas,
        "trainer.train_steps": args.train_steps,
    }


def cmd_run(args) -> int:
    from absl import logging as absl_logging

    from components.csv_format import CsvError
    from pipeline import config as config_lib, data_check

    try:
        config = config_lib.absolutize(config_lib.load(args.config, _run_overrides(args)))
        data = data_check.check(config.data.path, config.data.label, config.data.missing_values)
    except (config_lib.ConfigError, CsvError) as err:
        return _fail(str(err), 2)
    absl_logging.set_verbosity(absl_logging.INFO if args.verbose else absl_logging.WARNING)
    if config.trainer.emulate_replicas > 1:
        # Must happen before TensorFlow starts: the Trainer runs in this process.
        from trainer_module.strategy import configure_emulated_replicas

        configure_emulated_replicas(config.trainer.emulate_replicas)
    print(f"lockstep: {data.rows} rows from {len(data.files)} CSV file(s), label "
          f"'{config.data.label}' ({data.task}), {len(data.columns) - 1} features", flush=True)
    from components.example_validator import AnomaliesFound
    from pipeline import local_runner

    # TFX's Beam executors parse sys.argv with absl flags (so `-v` would become --verbosity).
    sys.argv = sys.argv[:1]
    tic = time.perf_counter()
    try:
        report = local_runner.run(config, data.input_base, data.pattern, data.task)
    except AnomaliesFound as err:
        return _fail(str(err), 1)
    except Exception as err:  # a component failed: one line, the cause last
        message = str(err).strip().splitlines()
        return _fail(f"pipeline run failed: {type(err).__name__}: "
                     f"{message[-1] if message else ''}", 1)
    print(report.describe())
    print(f"Total: {time.perf_counter() - tic:.1f}s")
    return 0


def _plan_sizes(args, config) -> list[tuple[str, int, bool]]:
    """(label, replicas, on_tpu) for each size asked for."""
    from pipeline import slices

    if args.replicas is not None:
        if args.replicas < 1:
            raise UsageError(f"--replicas must be at least 1, got {args.replicas}")
        return [(f"{args.replicas} replicas", args.replicas, False)]
    names = args.slice or ([config.trainer.tpu_slice] if config.trainer.tpu_slice else [])
    if names:
        try:
            found = [slices.get(name) for name in names]
        except slices.SliceError as err:
            raise UsageError(f"--slice: {err}") from None
        return [(s.name, s.replicas, True) for s in found]
    replicas = max(config.trainer.emulate_replicas, 1)
    return [(f"{replicas} replica(s)", replicas, False)]


def cmd_plan(args) -> int:
    import dataclasses
    import json

    from pipeline import config as config_lib, slices
    from trainer_module import scaling

    overrides = {"trainer.per_replica_batch": args.per_replica_batch,
                 "trainer.global_batch": args.global_batch,
                 "trainer.train_examples": args.train_examples,
                 "trainer.train_steps": args.train_steps}
    try:
        config = config_lib.load(args.config, overrides)
        if args.per_replica_batch:  # a per-replica batch on the command line wins over the file's global
            config.trainer.global_batch = 0
        sizes = _plan_sizes(args, config)
        plans = [(label, scaling.make_plan(config.trainer, replicas, on_tpu))
                 for label, replicas, on_tpu in sizes]
    except (config_lib.ConfigError, scaling.ScalingError) as err:
        return _fail(str(err), 2)
    if args.json:
        print(json.dumps([{"size": label, **dataclasses.asdict(plan)} for label, plan in plans],
                         indent=2))
        return 0
    for i, (label, plan) in enumerate(plans):
        if i:
            print()
        if label in slices.PRESETS:
            print("TPU slice " + slices.PRESETS[label].describe())
        print(plan.describe())
    if len(plans) > 1:
        first = plans[0][1]
        print("\nFrom " + plans[0][0] + ":")
        for label, plan in plans[1:]:
            print(f"  {label}: global batch x{plan.global_batch / first.global_batch:g}, "
                  f"train steps x{plan.train_steps / first.train_steps:g}, "
                  f"learning rate x{plan.learning_rate / first.learning_rate:g}, "
                  f"examples x{plan.examples / first.examples:g}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lockstep", description="A TFX pipeline with a synchronous data-parallel trainer.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the whole pipeline locally (LocalDagRunner)")
    _add_config_args(run)
    run.add_argument("--data", help="a CSV file or a directory of CSV files (default: bundled penguins)")
    run.add_argument("--label", help="the label column (default: species)")
    run.add_argument("--pipeline-root", help="where artifacts and ML Metadata go")
    run.add_argument("--serving-dir", help="where blessed models are pushed, one version dir each")
    run.add_argument("--no-cache", action="store_true", help="execute every component again")
    run.add_argument("--emulate-replicas", type=int, help="train on N emulated CPU replicas")
    run.add_argument("--train-steps", type=int, help="fixed train steps (default: from the example budget)")
    run.add_argument("-v", "--verbose", action="store_true", help="log TFX and trainer progress")
    run.set_defaults(func=cmd_run)

    plan = sub.add_parser(
        "plan", help="print the training plan for a slice or replica count, without training",
        description="The scaling rules as numbers: the per-replica batch stays fixed, the global "
                    "batch grows with the replicas, train steps shrink so the examples stay the "
                    "same, the learning rate scales with the global batch. Repeat --slice to "
                    "compare sizes (start small, then grow).")
    _add_config_args(plan)
    size = plan.add_mutually_exclusive_group()
    size.add_argument("--slice", action="append",
                      help="a TPU slice preset, e.g. v5e-4, v5e-16, v4-32 (repeatable)")
    size.add_argument("--replicas", type=int, help="a replica count (GPUs, CPU replicas, ...)")
    plan.add_argument("--per-replica-batch", type=int, help="override trainer.per_replica_batch")
    plan.add_argument("--global-batch", type=int, help="override trainer.global_batch")
    plan.add_argument("--train-examples", type=int, help="override trainer.train_examples")
    plan.add_argument("--train-steps", type=int, help="override trainer.train_steps")
    plan.add_argument("--json", action="store_true", help="print the plan(s) as JSON")
    plan.set_defaults(func=cmd_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as err:
        return _fail(str(err), 2)


if __name__ == "__main__":
    sys.exit(main())
