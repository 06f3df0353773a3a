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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as err:
        return _fail(str(err), 2)


if __name__ == "__main__":
    sys.exit(main())
