"""The project's errors and the exit status each one means, in one place.

Status 2: the input, a flag or the config (nothing was run). Status 1: something ran and failed (a
task, a component, the KFP server). Status 3: another run holds the pipeline root's lock (nothing
was run). Status 4: the run took longer than run.timeout_minutes and was stopped. Status 5: SIGTERM
stopped it (an eviction, a preemption, a `kill`); while training, after a checkpoint the next run
resumes from. Each error class declares its status (runtime/exit_status.py); an error
that declares none is a bug and keeps its traceback.
"""

from __future__ import annotations

from runtime import exit_status

FAILED, INPUT, LOCKED, TIMED_OUT, STOPPED = (exit_status.FAILED, exit_status.INPUT,
                                             exit_status.LOCKED, exit_status.TIMED_OUT,
                                             exit_status.STOPPED)


class PipelineFailed(Exception):
    """A pipeline component failed; the message is its error's last line."""

    lockstep_exit_status = FAILED


def status_of(err: BaseException) -> int | None:
    """The exit status `err` means, or None when it is none of the project's errors (a bug):
    each of them declares its own (runtime/exit_status.py)."""
    return exit_status.of(err)
