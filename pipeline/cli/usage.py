"""The command line's usage errors and exit statuses: a bad flag is a UsageError (status 2); every error the project
names (pipeline/errors.py) becomes a one-line message and its exit status here, in `main`."""

from __future__ import annotations

import argparse
import sys


class UsageError(Exception):
    """A bad flag or combination of flags; the message names it."""


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line (a UsageError, printed by `fail`) ending in
    where to read the flags, not its usage block: "unrecognized arguments: --bogus; see
    `lockstep run --help`". Its subcommands' parsers are of this class too."""

    def error(self, message: str):
        raise UsageError(f"{message}; see `{self.prog} --help`")


def status_of(err: BaseException) -> int | None:
    from pipeline import errors

    return errors.INPUT if isinstance(err, UsageError) else errors.status_of(err)


def fail(message: str, status: int) -> int:
    print(f"lockstep: error: {message}", file=sys.stderr)
    return status
