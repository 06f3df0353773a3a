"""`lockstep run` for the tests in a process forked from a fork server that has imported what a
run imports, instead of a fresh interpreter that imports it again (7 CPU-seconds a run here:
TensorFlow, TFX, Beam, TFMA). tests/conftest.py's `lockstep` and `lockstep_started` (for a test
that signals the run or reads its output as it comes) use it for `run`, and `python_started` for
a training test's worker processes (`python tests/train_job.py ...`: TensorFlow and lockstep's
trainer imported already, about 4 CPU-seconds less each); a test that asks for a
fresh interpreter, brings an environment of its own or runs another command, `make run`, the
benchmarks and kfp.local's tasks still start fresh interpreters, and test what only a fresh one
shows (TensorFlow's C++ start-up lines, a signal that meets the imports).

The child is a `lockstep run` process as far as the run can tell: `python -m pipeline.cli`'s
argv, sys.path and `console()`, the test's working directory and environment, stdin from
/dev/null, stdout and stderr to files the caller reads (buffered as a fresh interpreter's, or
not with PYTHONUNBUFFERED), Python's default signal handlers, its exit status (or the signal
that ended it) reported as subprocess's returncode. It forks its own worker lane as a fresh run
does (trainer_module/fork_safety.may_fork). What it does not have: the server's imports happened
before its environment was set, so a variable read as a module is imported (AT_IMPORT) must
have the server's value: `Server.serves` sends the rest to a fresh interpreter.

The server is this file run as a script: requests on stdin, one JSON line each; it answers on
stdout, one JSON line for a child started and one for a child ended. One server per test process
(pytest-xdist worker), started at its first run, ended with it. LOCKSTEP_TEST_FRESH_RUNS=1: no
server, every run a fresh interpreter (for a side-by-side measure, or to rule the server out)."""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Read once as a module is imported (by TensorFlow, by lockstep): the child must agree with the
# server on these, or it would run with the server's.
AT_IMPORT = ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL", "OPENBLAS_NUM_THREADS", "PYTHONPATH",
             "LOCKSTEP_REAL_IMPORTS", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED", "PYTHONWARNINGS",
             "PYTHONIOENCODING", "TMPDIR")  # tempfile's directory: kept from its first use
MAIN = str(REPO / "pipeline" / "cli" / "__main__.py")  # sys.argv[0] under `python -m pipeline.cli`


class Server:
    """The fork server, seen from the test process: `run` starts a child and waits for it."""

    def __init__(self, env: dict[str, str], log: Path):
        self.env = env
        with open(log, "ab") as written:
            self._process = subprocess.Popen([sys.executable, __file__], env=env, cwd=REPO,
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=written)
        self._read = b""  # answers read, not yet a whole line
        self._lock = threading.Lock()  # one reader of the answers at a time
        self._ended: dict[int, int] = {}  # pid -> returncode, for other threads' children
        self._started: dict[int, int] = {}  # request number -> pid, not yet taken by `run`
        self._requests = 0
        if self._answer() != {"ready": True}:
            raise RuntimeError(f"the fork server did not start; its log: {log}")

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a child with this environment runs as a fresh process would: the variables
        read at import are the server's, and the server is alive."""
        return (self._process.poll() is None
                and all(env.get(name) == self.env.get(name) for name in AT_IMPORT))

    def start(self, argv: list[str], cwd, env: dict[str, str], output: Path,
              python: bool = False) -> "Child":
        """A child running `lockstep ARGV` (its stdout and stderr written under `output`); with
        `python`, `python ARGV` (a script and its arguments, or -m, a module and its), its
        stderr written with its stdout, as subprocess's stderr=STDOUT has it."""
        err = output / ("stdout" if python else "stderr")
        with self._lock:
            self._requests += 1
            number = self._requests
            self._process.stdin.write(json.dumps(
                {"number": number, "argv": argv, "python": python, "cwd": str(cwd or os.getcwd()),
                 "env": env, "out": str(output / "stdout"), "err": str(err)}).encode() + b"\n")
            self._process.stdin.flush()
        pid = self._wait(lambda: self._started.pop(number, None), time.monotonic() + 60)
        return Child(self, argv, pid, output, merged=python)

    def run(self, argv: list[str], cwd, env: dict[str, str], timeout: float,
            output: Path) -> subprocess.CompletedProcess:
        """subprocess.run(LOCKSTEP + argv, capture_output=True, text=True, timeout=timeout)."""
        child = self.start(argv, cwd, env, output)
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise subprocess.TimeoutExpired(argv, timeout, *child.communicate()) from None
        return subprocess.CompletedProcess(argv, child.returncode, *child.communicate())

    def ended(self, pid: int, timeout: float | None) -> int | None:
        """The child's returncode once it ends, waiting up to `timeout` (None: no limit; 0: not
        at all): None when it still runs then."""
        deadline = time.monotonic() + (1e9 if timeout is None else timeout)
        try:
            code = self._wait(lambda: self._ended.pop(pid, None), deadline)
        except subprocess.TimeoutExpired:
            return None
        return code

    def _wait(self, found, deadline: float):
        while True:
            with self._lock:
                value = found()
                if value is not None:
                    return value
                if b"\n" not in self._read:
                    ready, _, _ = select.select([self._process.stdout], [], [],
                                                max(0.0, min(0.2, deadline - time.monotonic())))
                    if ready:
                        self._more()
                while b"\n" in self._read:
                    line, self._read = self._read.split(b"\n", 1)
                    answer = json.loads(line)
                    if "number" in answer:
                        self._started[answer["number"]] = answer["pid"]
                    elif "returncode" in answer:
                        self._ended[answer["pid"]] = answer["returncode"]
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("lockstep", 0)

    def _answer(self) -> dict:
        while b"\n" not in self._read:
            self._more()
        line, self._read = self._read.split(b"\n", 1)
        return json.loads(line)

    def _more(self) -> None:
        chunk = os.read(self._process.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError(f"the fork server ended (exit status {self._process.wait()})")
        self._read += chunk

    def close(self) -> None:
        self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()


class Child:
    """A child of the fork server, as the tests use a subprocess.Popen(LOCKSTEP + argv,
    stdout=PIPE, stderr=PIPE, text=True): pid, stdout and stderr (read as they come), poll,
    wait, send_signal, kill, communicate, returncode. `merged`: stderr=STDOUT's (stderr None)."""

    def __init__(self, server: Server, argv: list[str], pid: int, output: Path,
                 merged: bool = False):
        self.args, self.pid, self._server = argv, pid, server
        self.returncode: int | None = None
        self.stdout = _Following(output / "stdout", self.poll)
        self.stderr = None if merged else _Following(output / "stderr", self.poll)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.ended(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.ended(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """(stdout, stderr) not read yet, once the child has ended."""
        self.wait(timeout)
        return self.stdout.read(), None if self.stderr is None else self.stderr.read()


class _Following:
    """A child's output file read as the child writes it: readline waits for a whole line (or the
    child's end), as a pipe's does; read gives what has come (all of it, once the child ended)."""

    def __init__(self, path: Path, poll):
        import codecs

        self._path, self._poll, self._handle = path, poll, None
        self._pending = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def readline(self) -> str:
        while True:
            self._pending += self._new()
            if "\n" in self._pending:
                line, self._pending = self._pending.split("\n", 1)
                return line + "\n"
            if self._poll() is not None:
                self._pending += self._new()
                if "\n" in self._pending:
                    continue
                line, self._pending = self._pending, ""
                return line
            time.sleep(0.02)

    def read(self) -> str:
        rest, self._pending = self._pending + self._new(), ""
        return rest

    def __iter__(self):
        while line := self.readline():
            yield line

    def _new(self) -> str:
        if self._handle is None:
            if not self._path.exists():
                return ""
            self._handle = open(self._path, "rb")  # noqa: SIM115  open for the child's life
        return self._decoder.decode(self._handle.read())


def _serve() -> None:
    """The server: imports what `lockstep run` imports, then forks a child for each request and
    reports each child's end. It runs no TensorFlow, and says so: a child may fork its worker
    lane as a fresh run does (trainer_module/fork_safety.may_fork)."""
    import gc

    sys.path[0] = str(REPO)  # not this script's directory: lockstep's root (the child's PYTHONPATH)
    from runtime import processes
    from trainer_module import fork_safety

    processes.die_with_parent()
    answers = os.dup(1)
    requests = os.dup(0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)  # a library's print goes to the server's log, not among the answers
    with processes.imports_uncollected():
        import pipeline.cli
        from pipeline.cli import run  # noqa: F401
        from pipeline.local import dag_runner  # noqa: F401  (TensorFlow, TFX, Beam, TFMA)
        from pipeline.orchestrators import local_dag  # noqa: F401
        from pipeline.use_cases import local_run  # noqa: F401

    pipeline.cli.build_parser()
    fork_safety.tensorflow_imported_only()  # and none of it runs here
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    gc.freeze()  # what the imports made stays shared with every child, unwritten

    def say(answer: dict) -> None:
        os.write(answers, (json.dumps(answer) + "\n").encode())

    say({"ready": True})
    pending = b""
    while True:
        try:
            ready, _, _ = select.select([requests, wake_read], [], [])
        except InterruptedError:
            continue
        if wake_read in ready:
            os.read(wake_read, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                say({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})
        if requests in ready:
            chunk = os.read(requests, 65536)
            if not chunk:
                return  # the test process closed its end: done
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    for fd in (answers, requests, wake_read, wake_write):
                        os.close(fd)
                    _child(request)
                say({"number": request["number"], "pid": pid})
                print(f"forked_cli: process {pid}: lockstep {' '.join(request['argv'])}",
                      file=sys.stderr, flush=True)


def _child(request: dict) -> None:
    """In the fork: what `python -m pipeline.cli ARGV` has as it starts, then its console(); or
    what `python ARGV` has (request["python"]), then that script or module."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            if fd == 2 and path == request["out"]:  # stderr=STDOUT: the one file, one offset
                os.dup2(1, 2)
                continue
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        _stdio(bool(request["env"].get("PYTHONUNBUFFERED")))
        # A module-level logging call among the server's imports gave the root logger a handler
        # (logging.basicConfig's): a fresh interpreter reaches the run's Console without one, and
        # the Console's own then writes the log's records, with their times.
        logging.root.handlers.clear()
        # A test that gives up on a child sends SIGUSR1 first: every thread's stack to its stderr.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        from pipeline.cli import console, exit_now

        try:
            if request.get("python"):
                _python(request["argv"])
                exit_now(0)
            sys.path[0] = os.getcwd()  # -m puts the working directory first
            sys.argv = [MAIN, *request["argv"]]
            console()
        except SystemExit as end:
            if isinstance(end.code, str):
                print(end.code, file=sys.stderr)
            exit_now(end.code)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)


def _python(argv: list[str]) -> None:
    """`python ARGV` from here: -m and a module, or a script, run as __main__ with its sys.argv
    and sys.path[0] (the working directory, or the script's directory) as the interpreter sets
    them."""
    import runpy

    if argv[0] == "-m":
        sys.path[0] = os.getcwd()
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file first
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def _stdio(unbuffered: bool) -> None:
    """sys.stdout and sys.stderr on the new fds 1 and 2, as a fresh interpreter makes them: stdout
    buffered (a file), unless PYTHONUNBUFFERED; stderr a line at a time."""
    import io

    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw),
                                  encoding=getattr(sys, name).encoding, errors="backslashreplace"
                                  if name == "stderr" else "strict",
                                  line_buffering=name == "stderr" and not unbuffered,
                                  write_through=unbuffered)
        _REPLACED.append(getattr(sys, f"__{name}__"))  # kept: freed, it would close the fd
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


_REPLACED: list = []


if __name__ == "__main__":
    _serve()
