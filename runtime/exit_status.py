"""The exit status each of lockstep's errors means: each error class says its own, as the class
attribute STATUS_ATTRIBUTE, so pipeline/errors.py maps an error to a status without importing
every module that defines one. Status 2: the input, a flag or the config (nothing was run).
Status 1: something ran and failed. Status 3: another run holds the pipeline root's lock. Status
4: the run took longer than run.timeout_minutes. Status 5: SIGTERM stopped it."""

FAILED, INPUT, LOCKED, TIMED_OUT, STOPPED = 1, 2, 3, 4, 5
STATUS_ATTRIBUTE = "lockstep_exit_status"


def of(err: BaseException) -> int | None:
    """The status `err`'s class (or a base of it) declares; None for any other error."""
    return getattr(type(err), STATUS_ATTRIBUTE, None)
