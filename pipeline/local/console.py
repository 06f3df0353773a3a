"""What a person sees while a run lasts: a line as each component starts and ends, the Trainer's
progress, then the summary. Everything else (TensorFlow's C++ logs, absl, Beam, TFMA, Python
warnings) goes to a log file in the run's directory.

`Console` swaps the process's stdout and stderr file descriptors for the log file while the run
lasts, so even C++ logs written straight to fd 2 land there, and writes our own lines to the
saved terminal. It reads what to show from log records: the runner's "Component X is
running." / "is finished." (pipeline/local/dag_runner.py: several can run at once; the finished
record says whether TFX used a cached execution), and the Trainer's progress records
(trainer_module/controller.py, PROGRESS_LOGGER). On a terminal the progress is one line
redrawn in place; otherwise a plain line every tenth of the way.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time

from runtime.progress import PROGRESS_LOGGER, Progress  # the Trainer's progress records

_RUNNING = re.compile(r"Component (\S+) is running\.")
_FINISHED = re.compile(r"Component (\S+) is finished\.")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class _Watcher(logging.Handler):
    """Turns log records into the console's lines."""

    def __init__(self, console: "Console"):
        super().__init__(logging.INFO)
        self.console = console
        self.started: dict[str, float] = {}  # node -> when it began

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.name == PROGRESS_LOGGER and hasattr(record, "progress"):
                self.console.progress(Progress.from_dict(record.progress))
                return
            message = record.getMessage()
        except Exception:  # noqa: BLE001  a record we cannot read is not ours to show
            return
        if match := _RUNNING.match(message):
            node = match.group(1)
            self.started[node] = time.perf_counter()
            self.console.line(f"  {node:<20} running ...", transient=True)
        elif match := _FINISHED.match(message):
            node = match.group(1)
            seconds = time.perf_counter() - self.started.pop(node, time.perf_counter())
            state = "cached" if getattr(record, "cached", False) else "executed"
            self.console.line(f"  {node:<20} {state:<9} {seconds:6.1f}s")


class Console:
    """Use as a context manager around a run; `line` and `progress` write to the terminal."""

    def __init__(self, log_path: str | None, verbose: bool = False):
        self.log_path = log_path if not verbose else None
        self.verbose = verbose
        self._saved: tuple[int, int] | None = None
        self._terminal = sys.stdout
        self._tty = sys.stdout.isatty()
        self._transient = False
        self._watcher = _Watcher(self)
        self._shown_tenth = -1

    def __enter__(self) -> "Console":
        if self.log_path:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            sys.stdout.flush(), sys.stderr.flush()
            self._saved = (os.dup(1), os.dup(2))
            self._terminal = os.fdopen(os.dup(self._saved[0]), "w", buffering=1)
            log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1), os.dup2(log, 2)
            os.close(log)
            logging.captureWarnings(True)
        root = logging.getLogger()
        self._old_level = root.level
        root.setLevel(min(root.level or logging.WARNING, logging.INFO))
        for name in ("absl", PROGRESS_LOGGER):
            logging.getLogger(name).setLevel(logging.INFO)
        # The library logs themselves: to fd 2, which is the log file (or, -v, the terminal).
        self._records = None
        if not root.handlers:
            self._records = logging.StreamHandler(sys.stderr)
            self._records.setFormatter(logging.Formatter(
                "%(asctime)s %(levelname)s %(name)s: %(message)s"))
            root.addHandler(self._records)
        root.addHandler(self._watcher)
        return self

    def __exit__(self, *exc) -> None:
        root = logging.getLogger()
        root.removeHandler(self._watcher)
        if self._records is not None:
            root.removeHandler(self._records)
        root.setLevel(self._old_level)
        self._end_transient()
        if self._saved:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(self._saved[0], 1), os.dup2(self._saved[1], 2)
            for fd in self._saved:
                os.close(fd)
            self._terminal.close()
            self._terminal = sys.stdout
            self._saved = None
            logging.captureWarnings(False)

    def _end_transient(self) -> None:
        if self._transient:
            self._terminal.write("\n")
            self._transient = False

    def line(self, text: str, transient: bool = False) -> None:
        """A line on the terminal; a transient one (a TTY only) is replaced by the next line."""
        if transient and not self._tty:
            return
        if self._transient:
            self._terminal.write("\r\x1b[2K")
            self._transient = False
        self._terminal.write(text if transient else text + "\n")
        self._transient = transient
        self._terminal.flush()

    def progress(self, p: Progress) -> None:
        step, total = p.step, p.total
        done = step / max(total, 1)
        text = (f"step {step}/{total}  loss {p.loss:.4f}  {p.examples_per_sec:,.0f} examples/s  "
                f"ETA {_duration(p.eta)}")
        if self._tty:
            width = 24
            bar = "#" * int(done * width) + "." * (width - int(done * width))
            self.line(f"  {'Trainer':<20} [{bar}] {text}", transient=True)
        elif int(done * 10) > self._shown_tenth or step == total:
            self._shown_tenth = int(done * 10)
            self.line(f"  {'Trainer':<20} {text}")
