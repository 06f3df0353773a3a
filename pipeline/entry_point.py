"""The `lockstep` command as a child process or a crontab starts it: the console script the
project installs (pyproject.toml, [project.scripts]) beside this interpreter, found by its name.
Modules below the CLI start the command through this, never by the CLI's module path."""

from __future__ import annotations

import os
import sys
from importlib import metadata

NAME = "lockstep"


def command() -> list[str]:
    """argv[:n] that runs `lockstep`: the script beside sys.executable (a venv's bin/), else
    this interpreter calling the entry point the installed project declares under that name."""
    script = os.path.join(os.path.dirname(sys.executable), NAME)
    if os.access(script, os.X_OK):
        return [script]
    found = metadata.entry_points(group="console_scripts", name=NAME)
    if not found:
        raise LookupError(f"no `{NAME}` command is installed for {sys.executable}: "
                          "run `uv sync` (or `pip install .`) in the project")
    entry = next(iter(found))
    return [sys.executable, "-c", f"import sys; from {entry.module} import {entry.attr} as main; "
                                  "sys.exit(main())"]
