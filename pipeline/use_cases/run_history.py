"""Runs that happened, read back from ML Metadata (`lockstep runs`, `lockstep report`), and the
HTML page of a run with the trend over the runs before it, which `lockstep run` also writes at
the end of every run.

It only reads a pipeline root's ML Metadata and writes a page under its reports/ (or where it is
told); it never changes a run. A page that cannot be written is an error returned beside the
result, not raised: a run's result stands without its page.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pipeline.config import Config

if TYPE_CHECKING:
    from pipeline.reporting.run_report import RunReport

TREND_RUNS = 20  # past runs in a report's trend


def report_directory(config: Config) -> str:
    return os.path.join(config.paths.pipeline_root, "reports")


def write_page(report: RunReport, config: Config, log_file: str = os.devnull,
               history: list[RunReport] | None = None, directory: str | None = None
               ) -> tuple[str | None, str | None]:
    """The run's HTML report page, with the trend over past local runs.

    Args:
      log_file: where TensorFlow's and TFMA's chatter goes.
      history: the runs for the trend (default: the newest TREND_RUNS in ML Metadata).
      directory: where to write it (default: report_directory(config)).
    Returns:
      (path, None), or (None, the error) when it could not be written.
    """
    from pipeline.local.console import Console

    try:
        with Console(log_file):  # TensorFlow's and TFMA's chatter, to the run's log
            from pipeline.reporting import metadata_store  # noqa: F401  its imports' chatter here
            from pipeline.reporting import page

            if history is None:
                history = _history(config, TREND_RUNS)
            return page.write(report, directory or report_directory(config), history), None
    except Exception as err:  # noqa: BLE001  reported, not raised
        return None, f"{type(err).__name__}: {err}"


def _history(config: Config, limit: int | None = None) -> list[RunReport]:
    """The pipeline root's runs, newest first, by every orchestrator that keeps them there
    (pipeline/orchestrators/: the local runner's in ML Metadata, kfp-local's in their task
    directories)."""
    from pipeline import orchestrators

    runs = [run for name in orchestrators.names()
            if (target := orchestrators.get(name)).past_runs is not None
            for run in target.past_runs(config, limit)]
    return sorted(runs, key=lambda r: r.started, reverse=True)[:limit]


def no_runs(config: Config) -> str:
    return (f"no runs in {config.metadata_path} (local runs) or under "
            f"{config.paths.pipeline_root} (kfp-local runs)")


def past_run(config: Config, run_id: str | None = None) -> tuple[RunReport, list[RunReport]]:
    """One past run's report (default: the newest) and the runs up to it, newest first.

    Raises:
      LookupError: no runs, or no run of that id.
    """
    from pipeline.local.console import Console

    with Console(os.devnull):  # TensorFlow's and TFMA's import chatter
        history = _history(config)
    if not history:
        raise LookupError(no_runs(config))
    report = history[0] if run_id is None else next(
        (r for r in history if r.run_id == run_id), None)
    if report is None:
        raise LookupError(f"no run {run_id!r} in {config.metadata_path} or under "
                          f"{config.paths.pipeline_root} (lockstep runs lists them)")
    return report, [r for r in history if r.started <= report.started][:TREND_RUNS]


def write_report(config: Config, run_id: str | None = None, directory: str | None = None
                 ) -> tuple[str | None, str | None]:
    """`lockstep report`: a past run's page (default: the newest run's), with the trend up to it.

    Returns:
      as write_page: (path, None), or (None, why it could not be written).
    Raises:
      LookupError: no runs, or no run of that id.
    """
    report, history = past_run(config, run_id)
    return write_page(report, config, history=history, directory=directory)


def past_runs(config: Config, limit: int) -> list[RunReport]:
    """`lockstep runs`: the newest `limit` runs' reports, newest first: local runs' from ML
    Metadata, kfp-local runs' from their task directories."""
    from pipeline.local.console import Console

    with Console(os.devnull):  # TFMA's and TensorFlow's import chatter
        return _history(config, max(limit, 0))
