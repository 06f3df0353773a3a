"""The `lockstep` command line: one module per command (parser, call, print), errors mapped to
one-line messages and exit statuses in one place (errors.py). Heavy imports happen inside each
command, so `lockstep --help` is instant; global state (argv, warnings) changes only in `main`."""

from __future__ import annotations

import argparse
import os
import sys

from runtime.processes import exit_now

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: no C++ info logs


def build_parser() -> argparse.ArgumentParser:
    from pipeline.cli import compile as compile_cmd, kubeflow, plan, report, run, runs, verify
    from pipeline.cli.usage import Parser

    parser = Parser(
        prog="lockstep", description="A TFX pipeline with a synchronous data-parallel trainer.")
    sub = parser.add_subparsers(dest="command", required=True)
    run.add_parser(sub)
    compile_cmd.add_parser(sub)
    kubeflow.add_parsers(sub)
    plan.add_parser(sub)
    runs.add_parser(sub)
    report.add_parser(sub)
    verify.add_parser(sub)
    return parser


def console() -> None:
    """The `lockstep` command and `python -m pipeline.cli`: main(), then `exit_now` (Python's
    exit without the interpreter's teardown: runtime/processes.py)."""
    exit_now(main())


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import usage

    if not sys.warnoptions:  # libraries' version nags are not the user's business here
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:  # named with the command whose flags they are not
            raise usage.UsageError(f"unrecognized arguments: {' '.join(unknown)}; see "
                                   f"`lockstep {args.command} --help`")
    except usage.UsageError as err:  # a bad flag: one line and where to read them, status 2
        return usage.fail(str(err), usage.status_of(err))
    args.argv = argv
    # TFX's Beam executors parse sys.argv with absl flags (so `-v` would become --verbosity).
    sys.argv = sys.argv[:1]
    try:
        return args.func(args)
    except Exception as err:  # noqa: BLE001  mapped below, or re-raised with its traceback
        status = usage.status_of(err)
        if status is None:
            raise
        message = str(err)
    # The error, its traceback and the objects its frames hold are freed before the line, not
    # after it: what they say as they go (a TensorFlow object that a SIGTERM's raise left half
    # made: "Exception ignored in ... __del__") comes before the line, which stays the last.
    import gc

    gc.collect()
    return usage.fail(message, status)
