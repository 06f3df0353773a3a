"""Recurring local runs for single-machine users: one crontab entry per pipeline. Runs of one
pipeline never overlap: `lockstep run` holds the pipeline root's lock (pipeline/local/run_lock.py), so
a run that finds it held exits with status 3 and says since when, in the log.

A crontab line is a shell command that cron reads line by line and in which it turns `%` into a
newline: a path or name with a control character or `%` is refused, not escaped. The entry
creates the log's directory itself, so a run whose pipeline root does not exist yet (or was
removed) still starts and logs.

Cron reads the machine's local time zone here (KFP schedules are UTC).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

from pipeline import entry_point
from runtime import exit_status

MARKER = "# lockstep-schedule:"


class ScheduleError(RuntimeError):
    """One line: what could not be scheduled, and why."""

    lockstep_exit_status = exit_status.INPUT


def crontab_cron(cron: str) -> str:
    """Five crontab fields; KFP-style six fields are taken when the seconds field is 0."""
    fields = cron.split()
    if len(fields) == 6 and fields[0] == "0":
        fields = fields[1:]
    if len(fields) != 5:
        raise ScheduleError(f"--cron {cron!r}: a local schedule takes 5 crontab fields "
                            "(minute hour day month weekday)")
    return " ".join(fields)


def _safe(what: str, value: str) -> str:
    if "%" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ScheduleError(f"{what} {value!r}: a crontab line cannot carry control characters "
                            "or '%'; use another name or path")
    return value


def entry(name: str, cron: str, config: str | None, workdir: str, log: str) -> str:
    _safe("the schedule name", name)
    if not name.strip() or name != name.strip():
        raise ScheduleError(f"the schedule name {name!r}: must not be empty or padded")
    command = [_safe("the lockstep command", part) for part in entry_point.command()] + ["run"]
    if config:
        command += ["--config", _safe("the config path", os.path.abspath(config))]
    log = _safe("the log path", os.path.abspath(log))
    workdir = _safe("the working directory", workdir)
    return (f"{crontab_cron(cron)} mkdir -p {shlex.quote(os.path.dirname(log))} && "
            f"cd {shlex.quote(workdir)} && "
            f"PYTHONPATH={shlex.quote(workdir)} {shlex.join(command)} "
            f">> {shlex.quote(log)} 2>&1 {MARKER}{name}")


def _crontab() -> str:
    tool = shutil.which("crontab")
    if not tool:
        raise ScheduleError("crontab not found: a local schedule needs cron (on Debian or Ubuntu: "
                            "apt-get install cron, Debian's `cron` package); `lockstep schedule "
                            "--local --print` shows the entry without it")
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
    _safe("the schedule name", name)
    lines = _read()
    kept = [x for x in lines if not x.endswith(MARKER + name)]
    _write(kept)
    return len(kept) != len(lines)
