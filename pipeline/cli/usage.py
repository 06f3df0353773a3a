"""The command line's usage errors and exit statuses: a bad flag is a UsageError (status 2); every error the project
names (pipeline/errors.py) becomes a one-line message and its exit status here, in `main`."""

from __future__ import annotations

import sys


class UsageError(Exception):
    """A bad flag or combination of flags; the message names it."""


def status_of(err: BaseException) -> int | None:
    from pipeline import errors

    return errors.INPUT if isinstance(err, UsageError) else errors.status_of(err)


def fail(message: str, status: int) -> int:
    print(f"lockstep: error: {message}", file=sys.stderr)
    return status
