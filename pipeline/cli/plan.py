"""`lockstep plan`: the training plan for TPU slices or replica counts, side by side."""

from __future__ import annotations

import dataclasses
import json

from pipeline.cli.common import add_config_arg, load_config
from pipeline.cli.errors import UsageError


def add_parser(sub) -> None:
    plan = sub.add_parser(
        "plan", help="print the training plan for a slice or replica count, without training",
        description="The scaling rules as numbers: the per-replica batch stays fixed, the global "
                    "batch grows with the replicas, train steps shrink so the examples stay the "
                    "same, the learning rate scales with the global batch. Repeat --slice to "
                    "compare sizes (start small, then grow).")
    add_config_arg(plan)
    size = plan.add_mutually_exclusive_group()
    size.add_argument("--slice", action="append",
                      help="a TPU slice preset, e.g. v5e-4, v5e-16, v4-32 (repeatable)")
    size.add_argument("--replicas", type=int, help="a replica count (GPUs, CPU replicas, ...)")
    plan.add_argument("--per-replica-batch", type=int, help="override trainer.per_replica_batch")
    plan.add_argument("--global-batch", type=int, help="override trainer.global_batch")
    plan.add_argument("--train-examples", type=int, help="override trainer.train_examples")
    plan.add_argument("--train-steps", type=int, help="override trainer.train_steps")
    plan.add_argument("--epochs", type=float, help="override trainer.epochs")
    plan.add_argument("--data", help="the CSV data whose rows set the steps (default: data.path)")
    plan.add_argument("--label", help="its label column (default: data.label)")
    plan.add_argument("--rows", type=int,
                      help="the training split's rows (default: counted in data.path, times the "
                           "train split's share of the hash buckets)")
    plan.add_argument("--json", action="store_true", help="print the plan(s) as JSON")
    plan.set_defaults(func=command)


def _sizes(args, trainer) -> list[tuple[str, int, bool]]:
    """(label, replicas, on_tpu) for each size asked for."""
    from trainer_module import slices

    if args.replicas is not None:
        if args.replicas < 1:
            raise UsageError(f"--replicas must be at least 1, got {args.replicas}")
        return [(f"{args.replicas} replicas", args.replicas, False)]
    names = args.slice or ([trainer.tpu_slice] if trainer.tpu_slice else [])
    if names:
        try:
            found = [slices.get(name) for name in names]
        except slices.SliceError as err:
            raise UsageError(f"--slice: {err}") from None
        return [(s.name, s.replicas, True) for s in found]
    replicas = max(trainer.emulate_replicas, 1)
    return [(f"{replicas} replica(s)", replicas, False)]


def _train_rows(args, config) -> tuple[int | None, str]:
    """The training split's rows when the steps come from the data, and where that came from."""
    trainer = config.trainer
    if trainer.train_steps or trainer.train_examples:
        return None, ""
    if args.rows is not None:
        if args.rows < 1:
            raise UsageError(f"--rows must be at least 1, got {args.rows}")
        return args.rows, f"Training rows: {args.rows} (--rows)"
    from pipeline import data_check

    data = data_check.check(config.data.path, config.data.label, config.data.missing_values,
                            config.data.span_pattern, config.data.span_window, config.data.task,
                            config.data.span_marker)
    train, evaluation = config.data.train_buckets, config.data.eval_buckets
    rows = data.rows * train // (train + evaluation)
    return rows, (f"Training rows: about {rows} ({train} of {train + evaluation} hash buckets of "
                  f"the {data.rows} rows in {config.data.path})")


def command(args) -> int:
    from trainer_module import scaling, slices

    config = load_config(args, {"trainer.per_replica_batch": args.per_replica_batch,
                                "trainer.global_batch": args.global_batch,
                                "trainer.train_examples": args.train_examples,
                                "trainer.train_steps": args.train_steps,
                                "trainer.epochs": args.epochs,
                                "data.path": args.data, "data.label": args.label}, absolute=False)
    if args.per_replica_batch:  # a per-replica batch on the command line wins over the file's global
        config.trainer.global_batch = 0
    rows, where = _train_rows(args, config)
    plans = [(label, scaling.make_plan(config.trainer, replicas, on_tpu, rows))
             for label, replicas, on_tpu in _sizes(args, config.trainer)]
    if args.json:
        print(json.dumps([{"size": label, **dataclasses.asdict(plan)} for label, plan in plans],
                         indent=2))
        return 0
    if where:
        print(where + "\n")
    headers = {label: "TPU slice " + slices.PRESETS[label].describe()
               for label, _ in plans if label in slices.PRESETS}
    print(scaling.describe_plans(plans, headers))
    return 0
