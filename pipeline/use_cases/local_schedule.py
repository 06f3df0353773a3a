"""`lockstep schedule --local`: a crontab entry on this machine that runs `lockstep run` under the
pipeline root's lock, so scheduled runs never overlap; and its removal.

It edits this user's crontab and nothing else (pipeline/local/schedule.py writes the line and
refuses a name or path with a control character or `%` rather than escape it); it runs nothing now.
"""

from __future__ import annotations

import os

from pipeline.config import Config


def schedule_locally(config: Config, config_path: str | None, cron: str,
                     name: str | None = None, install: bool = True) -> str:
    """Installs (or replaces) the crontab entry `name` (default: the pipeline's name).

    Args:
      config_path: the config file the scheduled runs load (None: the defaults).
      cron: 5 fields, in the machine's local time.
      install: False (`--print`): only make the line; touch neither the crontab nor the disk,
        and need no crontab.
    Returns:
      the line installed (or that would be).
    Raises:
      ScheduleError: a bad cron, name or path, or no crontab, in one line.
    """
    from pipeline.local import schedule as crontab

    log = os.path.join(config.paths.pipeline_root, "logs", "schedule.log")
    line = crontab.entry(name or config.pipeline_name, cron, config_path, os.getcwd(), log=log)
    if not install:
        return line
    os.makedirs(os.path.dirname(log), exist_ok=True)
    crontab.install(name or config.pipeline_name, line)
    return line


def unschedule_locally(config: Config, name: str | None = None) -> bool:
    """Removes the crontab entry `name` (default: the pipeline's name); whether there was one."""
    from pipeline.local import schedule as crontab

    return crontab.remove(name or config.pipeline_name)
