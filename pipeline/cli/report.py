"""`lockstep report [RUN]`: the run report page (pipeline/reporting/page.py) of a past run, or of
the newest; `lockstep run` writes it at the end of every run."""

from __future__ import annotations

import os

from pipeline.cli.common import add_config_arg, load_config
from pipeline.cli.errors import UsageError


def add_parser(sub) -> None:
    report = sub.add_parser("report", help="write the HTML report of a run (default: the newest)")
    add_config_arg(report)
    report.add_argument("run", nargs="?", help="a run id, as `lockstep runs` lists them")
    report.add_argument("--pipeline-root", help="the pipeline root whose runs to read")
    report.add_argument("--output", help="the directory to write it to "
                                         "(default: <pipeline root>/reports)")
    report.set_defaults(func=command)


def command(args) -> int:
    from pipeline.local.console import Console

    config = load_config(args, {"paths.pipeline_root": args.pipeline_root})
    if not os.path.exists(config.metadata_path):
        raise UsageError(f"no runs in {config.metadata_path}")
    with Console(os.devnull):  # TensorFlow's and TFMA's import chatter
        from pipeline.reporting import metadata_store
        from pipeline.reporting import page as report_page

        try:
            report = metadata_store.report(config, args.run)
        except LookupError as err:
            raise UsageError(str(err)) from None
        history = [r for r in metadata_store.history(config) if r.started <= report.started]
        path = report_page.write(report, args.output or report_directory(config), history[:20])
    print(f"lockstep: wrote {path}")
    return 0


def report_directory(config) -> str:
    return os.path.join(config.paths.pipeline_root, "reports")
