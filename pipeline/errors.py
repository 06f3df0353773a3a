"""The project's errors and the exit status each one means, in one place.

Status 2: the input, a flag or the config (nothing was run). Status 1: something ran and failed (a
task, a component, the KFP server). Status 3: another run holds the pipeline root's lock (nothing
was run). Status 4: the run took longer than run.timeout_minutes and was stopped. Status 5: SIGTERM
stopped it (an eviction, a preemption, a `kill`); while training, after a checkpoint the next run
resumes from. An error not listed here is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

from trainer_module.termination import PREEMPTED_STATUS, Preempted, Stopped

FAILED, INPUT, LOCKED, TIMED_OUT, STOPPED = 1, 2, 3, 4, PREEMPTED_STATUS


class PipelineFailed(Exception):
    """A pipeline component failed; the message is its error's last line."""


def _statuses() -> list[tuple[type[BaseException], int]]:
    from components.csv_format import CsvError
    from components.spans import SpanError
    from pipeline.config import ConfigError
    from pipeline.preflight import DriftError
    from pipeline.split_check import SkewError
    from pipeline.storage import StorageError
    from pipeline.local.schedule import ScheduleError
    from pipeline.local.run_lock import Locked
    from trainer_module.settings import TrainerConfigError
    from trainer_module.scaling import ScalingError
    from trainer_module.slices import SliceError

    return [(ConfigError, INPUT), (CsvError, INPUT), (DriftError, INPUT), (SkewError, INPUT),
            (SpanError, INPUT), (StorageError, INPUT),
            (TrainerConfigError, INPUT), (ScalingError, INPUT), (SliceError, INPUT),
            (ScheduleError, INPUT), (Locked, LOCKED), (Preempted, STOPPED),
            (Stopped, STOPPED)]


def _run_statuses() -> list[tuple[type[BaseException], int]]:
    """Errors of modules that load TFX or kfp: looked up only when something was raised."""
    found = [(PipelineFailed, FAILED)]
    for module, name in (("pipeline.kubeflow.client", "KfpError"),
                         ("pipeline.local.kfp_local", "KfpLocalError"),
                         ("components.example_validator", "AnomaliesFound")):
        if module in sys.modules:
            found.append((getattr(sys.modules[module], name), FAILED))
    return found


def status_of(err: BaseException) -> int | None:
    """The exit status `err` means, or None when it is none of the project's errors (a bug)."""
    for kind, status in _statuses() + _run_statuses():
        if isinstance(err, kind):
            return status
    return None
