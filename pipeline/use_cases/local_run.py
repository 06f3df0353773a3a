"""`lockstep run`: the pipeline run here, in this process with TFX's LocalDagRunner or, compiled,
under kfp.local (a process a task), under the pipeline root's lock and a time limit, with the
console showing it; a producer's corrupt cached output read once more without the cache; the
run's page written at the end.

It prepares the run itself (preparing.py) and says what it decided through `say` before the long
part starts; it prints nothing and parses nothing. It refuses a second run under the same lock
(run_lock.Locked) rather than waiting past run.lock_wait_seconds, and it never retries a failed
component: only the cached output that does not read is made again, once.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import TYPE_CHECKING

from pipeline import errors, orchestrators
from pipeline.config import Config, ConfigError
from pipeline.orchestrators import LOCAL, Orchestrator
from pipeline.use_cases import Say, preparing, quiet, run_history
from runtime import error_line, termination

if TYPE_CHECKING:
    from pipeline.local.console import Console
    from pipeline.reporting.run_report import RunReport

@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a run did: its report (pipeline/reporting/run_report.py), its page (or why there is
    none), its time; or, when nothing was new, no report and the line that says so."""

    report: RunReport | None = None
    page: str | None = None
    page_error: str | None = None
    seconds: float = 0.0
    unchanged: str = ""

    def lines(self) -> list[str]:
        """What the run says at its end (the components had their lines as they ran)."""
        if self.report is None:
            return [self.unchanged]
        page = (f"Report: {self.page}" if self.page else
                f"lockstep: the run report could not be written: {self.page_error}")
        return [self.report.describe(with_nodes=False), page, f"Total: {self.seconds:.1f}s"]


def run(config: Config, *, orchestrator: str = LOCAL, force: bool = False,
        verbose: bool = False, log_file: str | None = None, lock: str | None = None,
        say: Say = quiet) -> Outcome:
    """Prepares the run, stops on drift, skips it when no new span arrived, else runs the whole
    pipeline here and writes its page.

    Args:
      config: the config, absolutized.
      orchestrator: the name of one that runs here (pipeline/orchestrators/: "local", TFX's
        launcher in this process; "kfp-local", the compiled spec under kfp.local, each task a
        process; or one registered by code).
      force: run even when the spans are those the serving model was trained on.
      verbose: library logs here, not only in the log file.
      log_file: where library logs go (default: log_path(config)).
      lock: the run lock (default: <pipeline root>/run.lock).
      say: called with each line before the run starts: the data check's, the drift's, and
        (not verbose, once the lock is held) where the library logs go.
    Returns:
      the Outcome: with no report when there was nothing new to run.
    Raises:
      ConfigError, CsvError, SpanError, SkewError, DriftError, StorageError: before anything
      runs (preparing.py); run_lock.Locked: another run holds the lock; errors.PipelineFailed:
      a component failed (its last line); the project's own errors (pipeline/errors.py) unchanged.
    """
    target = _orchestrator(orchestrator)
    phase = _Phase("while the data were checked, before any component ran; nothing was written")
    with termination.stop_on_sigterm(phase.stopped):
        prepared = preparing.prepare(config)
        for line in prepared.lines():
            say(line)
        prepared = preparing.check_drift(prepared)
        if prepared.drift:
            say(prepared.drift.line())
        unchanged = None if force else preparing.nothing_new(prepared)
        if unchanged:
            return Outcome(unchanged=unchanged)
        log_file = log_file or log_path(prepared.config)
        return _run_prepared(prepared, target, log_file, verbose, lock, phase, say)


def _orchestrator(name: str) -> Orchestrator:
    """The registered orchestrator of that name that runs here (ConfigError otherwise)."""
    try:
        target = orchestrators.get(name)
    except orchestrators.UnknownOrchestrator as err:
        raise ConfigError(str(err)) from None
    if target.run is None:
        raise ConfigError(f"orchestrator {name!r} does not run here: `lockstep submit` sends "
                          f"its spec to a cluster; here: {', '.join(orchestrators.names(True))}")
    return target


class _Phase:
    """What a SIGTERM outside the components stops (LocalDagRunner names the nodes itself)."""

    def __init__(self, now: str):
        self.now = now

    def stopped(self) -> str:
        return f"stopped by SIGTERM {self.now}"


def log_path(config: Config) -> str:
    """A new run's log file: <pipeline root>/logs/run-<UTC time to the microsecond>-<pid>.log, its
    own (names in the order the runs started). To the second, a run that began in the second
    another ended wrote on in that one's log."""
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    return os.path.join(config.paths.pipeline_root, "logs",
                        f"{now:run-%Y%m%dT%H%M%S.%fZ}-{os.getpid()}.log")


def _run_prepared(prepared: preparing.Prepared, orchestrator: Orchestrator, log_file: str,
                  verbose: bool, lock: str | None, phase: _Phase, say: Say) -> Outcome:
    """The run itself: the object stores' storage check, the time limit, the lock, where the
    library logs go (said once the lock is held: a run refused keeps no log) and the console
    around the orchestrator; then the report's own facts and the page."""
    from absl import logging as absl_logging

    from pipeline.local import run_lock
    from pipeline.local.console import Console

    config = prepared.config
    preparing.check_storage(prepared, remote=True)
    absl_logging.set_verbosity(absl_logging.INFO)  # all of it to the log file (or, -v, here)
    tic = time.perf_counter()
    _watchdog(config.run.timeout_minutes)
    phase.now = ("while the pipeline ran; run again: the components that completed are "
                 "reused")
    try:
        with run_lock.hold(lock or run_lock.default_path(config.paths.pipeline_root),
                           config.run.lock_wait_seconds):
            if not verbose:
                say(f"lockstep: library logs go to {log_file} (-v shows them here)")
            with Console(log_file, verbose) as console:
                report = _orchestrate(prepared, orchestrator, console)
    except Exception as err:  # noqa: BLE001  a component failed: its error, whatever it is
        if errors.status_of(err) is not None:  # the project's own: unchanged
            raise
        raise failure(err, "pipeline run failed", config) from err
    phase.now = ("while the run's page was written; the run itself completed (what it pushed "
                 "stays pushed): `lockstep report` writes the page again")
    report.task = prepared.task
    report.drift = prepared.drift.to_dict() if prepared.drift else {}
    report.skew = prepared.skew.to_dict() if prepared.skew else {}
    page, page_error = run_history.write_page(report, config, log_file)
    if page_error:
        from pipeline import storage

        page_error = storage.out_of_space(page_error, storage.places(
            config.paths.pipeline_root, config.paths.serving_dir, 0),
            remedy="free some space, then `lockstep report` writes it") or page_error
    return Outcome(report, page, page_error, time.perf_counter() - tic)


def failure(err: Exception, what: str, config: Config | None = None) -> errors.PipelineFailed:
    """A failure inside a run that is not one of the project's own errors, in one line: what
    failed (in which node, for LocalDagRunner's), the error's type and the line of its message
    that names the failure (runtime/error_line.py: its last, or TensorFlow's root error); a full
    disk says which place and what to do."""
    last = error_line.of(str(err))
    if getattr(err, "lockstep_node", ""):
        what = f"{what} in {err.lockstep_node}"
    if config is not None:
        from pipeline import storage

        full = storage.out_of_space(str(err), storage.places(
            config.paths.pipeline_root, config.paths.serving_dir, 0))
        if full:
            return errors.PipelineFailed(f"{what}: {full} ({type(err).__name__}: {last[:160]})")
    return errors.PipelineFailed(f"{what}: {type(err).__name__}: {last}")


def _orchestrate(prepared: preparing.Prepared, orchestrator: Orchestrator,
                 console: Console) -> RunReport:
    config = prepared.config
    if config.trainer.emulate_replicas > 1:
        # Before TensorFlow starts: with LocalDagRunner the Trainer runs in this process.
        from trainer_module.strategy import configure_emulated_replicas

        configure_emulated_replicas(config.trainer.emulate_replicas)
    return orchestrator.run(prepared, console)


def _watchdog(minutes: float) -> threading.Timer | None:
    """After `minutes`, says so on the real stderr and ends the process with status 4 (the
    kernel releases the run lock). Started before the console redirects fd 2."""
    if not minutes:
        return None
    terminal = os.dup(2)

    def stop():
        os.write(terminal, (f"lockstep: error: the run took longer than {minutes:g} min "
                            "(run.timeout_minutes); stopped\n").encode())
        os._exit(errors.TIMED_OUT)

    timer = threading.Timer(minutes * 60, stop)
    timer.daemon = True
    timer.start()
    return timer
