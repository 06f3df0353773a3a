"""`lockstep plan`: the training plan for TPU slices, replica counts or the config's GPU machines,
side by side."""

from __future__ import annotations

import dataclasses
import json

from pipeline.cli.common import add_config_arg, load_config
from pipeline.cli.usage import UsageError


def add_parser(sub) -> None:
    plan = sub.add_parser(
        "plan", help="print the training plan for a slice, replica count or the config's GPU "
             "machines, without training",
        description="The scaling rules as numbers: the per-replica batch stays fixed, the global "
                    "batch grows with the replicas, train steps shrink so the examples stay the "
                    "same, the learning rate scales with the global batch. Repeat --slice to "
                    "compare sizes (start small, then grow).")
    add_config_arg(plan)
    size = plan.add_mutually_exclusive_group()
    size.add_argument("--slice", action="append",
                      help="a TPU slice preset, e.g. v5e-4, v5e-16, v4-32 (repeatable)")
    size.add_argument("--replicas", type=int, help="a replica count (GPUs, CPU replicas, ...)")
    plan.add_argument("--like", metavar="SLICE",
                      help="a larger TPU slice to rehearse: each size accumulates the "
                           "micro-batches (trainer.accumulation_steps) that make its global "
                           "batch, learning rate and steps that slice's, e.g. --slice v5e-4 "
                           "--like v5e-16")
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
    plan.add_argument("--tables", action="store_true",
                      help="read the data for the built-in model's embedding tables: each "
                           "table's rows and bytes, and a replica's share at each size (printed "
                           "whenever the plan reads the data for its rows)")
    plan.add_argument("--json", action="store_true", help="print the plan(s) as JSON")
    plan.set_defaults(func=command)


def command(args) -> int:
    from pipeline.use_cases import planning
    from trainer_module import scaling, slices

    overrides = {"trainer.per_replica_batch": args.per_replica_batch,
                 "trainer.global_batch": args.global_batch,
                 "trainer.train_examples": args.train_examples,
                 "trainer.train_steps": args.train_steps, "trainer.epochs": args.epochs,
                 "data.path": args.data, "data.label": args.label}
    if args.per_replica_batch:  # a per-replica batch on the command line wins over the file's
        overrides["trainer.global_batch"] = 0
    for flag, value in (("--replicas", args.replicas), ("--rows", args.rows)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    config = load_config(args, overrides, absolute=False)
    try:
        planned = planning.plan(config, slices=args.slice, replicas=args.replicas,
                                like=args.like, rows=args.rows, tables=args.tables)
    except planning.SizeError as err:
        flag = f"--{err.which} {err.name}" if err.name else f"--{err.which}"
        raise UsageError(f"{flag}: {err}") from None
    plans = planned.plans
    if args.json:
        print(json.dumps([{"size": label, **dataclasses.asdict(plan)} for label, plan in plans],
                         indent=2))
        return 0
    if planned.rows_line:
        print(planned.rows_line + "\n")
    headers = {**{label: "TPU slice " + slices.PRESETS[label].describe()
                  for label, _ in plans if label in slices.PRESETS}, **planned.headers}
    print(scaling.describe_plans(plans, headers))
    if planned.table_lines:
        print("\n" + "\n".join(planned.table_lines))
    return 0
