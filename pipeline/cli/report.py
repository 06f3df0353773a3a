"""`lockstep report [RUN]`: the run report page (pipeline/reporting/page.py) of a past run, or of
the newest; `lockstep run` writes it at the end of every run."""

from __future__ import annotations

from pipeline.cli.common import add_config_arg, load_config
from pipeline.cli.usage import UsageError


def add_parser(sub) -> None:
    report = sub.add_parser("report", help="write the HTML report of a run (default: the newest)")
    add_config_arg(report)
    report.add_argument("run", nargs="?", help="a run id, as `lockstep runs` lists them")
    report.add_argument("--pipeline-root", help="the pipeline root whose runs to read")
    report.add_argument("--output", help="the directory to write it to "
                                         "(default: <pipeline root>/reports)")
    report.set_defaults(func=command)


def command(args) -> int:
    from pipeline.use_cases import run_history

    config = load_config(args, {"paths.pipeline_root": args.pipeline_root})
    try:
        path, error = run_history.write_report(config, args.run, args.output)
    except LookupError as err:
        raise UsageError(str(err)) from None
    if error:
        raise UsageError(f"the report could not be written: {error}")
    print(f"lockstep: wrote {path}")
    return 0
