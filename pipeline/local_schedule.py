"""Recurring local runs for single-machine users: one crontab entry per pipeline, and a lock so
two runs of the same pipeline never overlap (the second one skips, and says so in the log).

Cron reads the machine's local time zone here (KFP schedules are UTC).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
import sys

MARKER = "# lockstep-schedule:"


class ScheduleError(RuntimeError):
    """One line: what could not be scheduled, and why."""


class Locked(RuntimeError):
    """Another run holds the lock."""


@contextlib.contextmanager
def run_lock(path: str):
    """Held for the whole run; released by the kernel even if the process is killed."""
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    handle = open(path, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(f"another lockstep run holds {path}; skipping this one") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()


def crontab_cron(cron: str) -> str:
    """Five crontab fields; KFP-style six fields are taken when the seconds field is 0."""
    fields = cron.split()
    if len(fields) == 6 and fields[0] == "0":
        fields = fields[1:]
    if len(fields) != 5:
        raise ScheduleError(f"--cron {cron!r}: a local schedule takes 5 crontab fields "
                            "(minute hour day month weekday)")
    return " ".join(fields)


def entry(name: str, cron: str, config: str | None, workdir: str, log: str, lock: str) -> str:
    command = [sys.executable, "-m", "pipeline.cli", "run", "--lock", lock]
    if config:
        command += ["--config", os.path.abspath(config)]
    return (f"{crontab_cron(cron)} cd {shlex.quote(workdir)} && "
            f"PYTHONPATH={shlex.quote(workdir)} {shlex.join(command)} "
            f">> {shlex.quote(log)} 2>&1 {MARKER}{name}")


def _crontab() -> str:
    tool = shutil.which("crontab")
    if not tool:
        raise ScheduleError("crontab not found: install cron (e.g. apt-get install cron)")
    return tool


def _read() -> list[str]:
    result = subprocess.run([_crontab(), "-l"], capture_output=True, text=True)
    if result.returncode != 0:
        if "no crontab" in result.stderr.lower():
            return []
        raise ScheduleError(f"crontab -l failed: {result.stderr.strip().splitlines()[-1:]}")
    return result.stdout.splitlines()


def _write(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n" if lines else ""
    result = subprocess.run([_crontab(), "-"], input=text, capture_output=True, text=True)
    if result.returncode != 0:
        raise ScheduleError(f"crontab - failed: {result.stderr.strip()}")


def install(name: str, line: str) -> None:
    """Adds the entry, replacing one this pipeline had before."""
    _write([x for x in _read() if not x.endswith(MARKER + name)] + [line])


def remove(name: str) -> bool:
    lines = _read()
    kept = [x for x in lines if not x.endswith(MARKER + name)]
    _write(kept)
    return len(kept) != len(lines)
