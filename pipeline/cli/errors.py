"""The one place where the project's errors become a one-line message and an exit status.

Every command raises; `main` catches only what is listed here. Status 2: the input, a flag or
the config (nothing was run). Status 1: something ran and failed (a task, a component, the KFP
server). Status 3: another run holds the pipeline root's lock (nothing was run). Status 4: the
run took longer than run.timeout_minutes and was stopped. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import sys


LOCKED = 3
TIMED_OUT = 4


class UsageError(Exception):
    """A bad flag or combination of flags; the message names it."""


class PipelineFailed(Exception):
    """A pipeline component failed; the message is its error's last line."""


def _statuses() -> list[tuple[type[BaseException], int]]:
    from components.csv_format import CsvError
    from components.spans import SpanError
    from pipeline.config import ConfigError
    from pipeline.preflight import DriftError
    from pipeline.local.schedule import ScheduleError
    from pipeline.local.run_lock import Locked
    from trainer_module.config import TrainerConfigError
    from trainer_module.scaling import ScalingError
    from trainer_module.slices import SliceError

    return [(UsageError, 2), (ConfigError, 2), (CsvError, 2), (DriftError, 2), (SpanError, 2),
            (TrainerConfigError, 2), (ScalingError, 2), (SliceError, 2), (ScheduleError, 2),
            (Locked, LOCKED)]


def _run_statuses() -> list[tuple[type[BaseException], int]]:
    """Errors of modules that load TFX or kfp: looked up only when something was raised."""
    found = [(PipelineFailed, 1)]
    for module, name in (("pipeline.kubeflow.client", "KfpError"),
                         ("pipeline.local.kfp_local", "KfpLocalError"),
                         ("components.example_validator", "AnomaliesFound")):
        if module in sys.modules:
            found.append((getattr(sys.modules[module], name), 1))
    return found


def status_of(err: BaseException) -> int | None:
    for kind, status in _statuses() + _run_statuses():
        if isinstance(err, kind):
            return status
    return None


def fail(message: str, status: int) -> int:
    print(f"lockstep: error: {message}", file=sys.stderr)
    return status
