"""The one line of an error's message that says what went wrong, for a one-line report.

Most errors say it last: a Python exception's message, or a Beam error whose message carries the
traceback of the step it wraps. TensorFlow's status messages do not: a failed graph or a failed
remote op ends with its bookkeeping ("0 successful operations.", "0 derived errors ignored.
[Op:Identity] name:"), and the cause is the first root error, "(0) UNAVAILABLE: ...". That line,
where there is one; else the last line that is not bookkeeping."""

from __future__ import annotations

import re
import sys
import traceback

from runtime import exit_status

# TensorFlow's first root error: "  (0) UNAVAILABLE: failed to connect to all addresses".
_ROOT_ERROR = re.compile(r"^\s*\(0\) ([A-Z_]+: .*\S)")
_BOOKKEEPING = re.compile(
    r"^(\d+ successful operations\.|\d+ derived errors ignored\.|\d+ root error\(s\) found\.|"
    r"\[\[.*\]\]$|\[Op:\w+\]|Detected at node|Graph execution error:$)")


def of(message: str) -> str:
    """The line of `message` that names the failure ("" for an empty message)."""
    lines = [line.strip() for line in message.strip().splitlines()]
    for line in lines:
        root = _ROOT_ERROR.match(line)
        if root:
            return root.group(1)
    said = [line for line in lines if line and not _BOOKKEEPING.match(line)]
    return said[-1] if said else (lines[-1] if lines else "")


def report(err: BaseException, who: str) -> int:
    """A process's failure on its stderr: the traceback, then `who: Type: line` as its last line
    (the one a parent process reports); returns the exit status the error means."""
    traceback.print_exception(err, file=sys.stderr)
    print(f"{who}: {type(err).__name__}: {of(str(err))}", file=sys.stderr, flush=True)
    return exit_status.of(err) or exit_status.FAILED
