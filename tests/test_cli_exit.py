"""The command's exit (pipeline/cli `exit_now`): Python's exit without the interpreter's teardown;
what that exit does for the user still happens."""

import os
import subprocess
import sys
import textwrap
import time

from conftest import REPO, lockstep


def test_exit_now_joins_threads_runs_atexit_and_flushes(tmp_path):
    script = textwrap.dedent(f"""
        import atexit, logging, tempfile, threading, time
        from pipeline import cli
        log = logging.getLogger("t")
        log.addHandler(logging.FileHandler(r"{tmp_path}/log.txt"))
        log.warning("logged")  # a FileHandler flushes per record; closed by logging's atexit
        kept = tempfile.TemporaryDirectory(dir=r"{tmp_path}")  # removed at exit
        atexit.register(lambda: open(r"{tmp_path}/atexit", "w").close())
        def late():
            time.sleep(0.5)
            open(r"{tmp_path}/thread", "w").close()
        threading.Thread(target=late).start()
        print("unflushed", end="")
        cli.exit_now(3)
        print("never")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "unflushed"
    assert (tmp_path / "atexit").exists() and (tmp_path / "thread").exists()
    assert (tmp_path / "log.txt").read_text() == "logged\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atexit", "log.txt", "thread"]


def test_an_error_or_a_stop_exits_though_an_interrupted_library_left_a_thread_running(tmp_path):
    """A SIGTERM's raise that lands in Beam's bundle processor between its state sampler's
    thread start and `started = True` leaves that thread (not a daemon) sampling for good:
    Beam's `stop_if_still_running` sees it never started. Python's exit joins such threads
    without limit, and so did exit_now: a `lockstep run` stopped as StatisticsGen started hung
    (1 in 80 stops here; a fresh-clone CI's test_stops killed it after 120 s). Ending with a
    non-zero status, the process waits STRAGGLER_SECONDS for them, then ends, its status kept."""
    script = textwrap.dedent("""
        import sys, threading, time
        from apache_beam.runners.worker import statesampler
        from apache_beam.utils.counters import CounterFactory
        from pipeline import cli

        sampler = statesampler.StateSampler("stage", CounterFactory())
        super(statesampler.StateSampler, sampler).start()  # the thread runs; `started` not set
        sampler.stop_if_still_running()  # Beam's `finally`: nothing, it never "started"
        [left] = [t for t in threading.enumerate()
                  if t is not threading.main_thread() and not t.daemon]
        left.join(1.0)
        assert left.is_alive(), "the sampler's thread ended: Python's exit would not wait"
        print(time.monotonic(), flush=True)
        cli.exit_now(int(sys.argv[1]))
    """)
    from runtime.processes import STRAGGLER_SECONDS

    done = subprocess.run([sys.executable, "-W", "ignore", "-c", script, "5"], cwd=REPO, text=True,
                          capture_output=True, timeout=60)
    ended = time.monotonic()
    assert done.returncode == 5, done.stderr
    assert STRAGGLER_SECONDS <= ended - float(done.stdout) < STRAGGLER_SECONDS + 3, done.stdout
    assert done.stderr == "", done.stderr  # the error's line stays the last one


def test_the_error_line_is_the_last_even_when_the_errors_frames_say_something_as_they_go(
        tmp_path):
    """A SIGTERM's raise inside a library can leave an object half made, whose __del__ then
    complains ("Exception ignored in ..."): freed with the error's traceback, in a cycle, it
    spoke after the `lockstep: error:` line (a random-instant stop in tests/test_stops.py ended
    on TensorFlow's "'ScopedTFImportGraphDefOptions' object has no attribute 'options'")."""
    script = textwrap.dedent("""
        import sys
        from pipeline import cli, errors
        from pipeline.cli import usage

        class HalfMade:
            def __init__(self):
                self.me = self  # a cycle: freed by the collector, not by the refcount
            def __del__(self):
                raise AttributeError("'HalfMade' object has no attribute 'options'")

        def command(args):
            held = HalfMade()
            raise usage.UsageError("bad input")

        parser = cli.build_parser()
        parser._subparsers._group_actions[0].choices["runs"].set_defaults(func=command)
        cli.build_parser = lambda: parser
        sys.exit(cli.main(["runs"]))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "'HalfMade' object has no attribute 'options'" in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "lockstep: error: bad input", done.stderr


def test_the_command_exits_with_its_status(tmp_path):
    ok = lockstep("--help")
    assert ok.returncode == 0 and "lockstep" in ok.stdout
    bad = lockstep("plan", "--config", tmp_path / "missing.toml")
    assert bad.returncode != 0 and "missing.toml" in bad.stderr


def test_a_bad_flag_is_one_line_naming_where_to_read_the_flags(tmp_path):
    for argv, line in (
            (["run", "--bogus"], "lockstep: error: unrecognized arguments: --bogus; see "
                                 "`lockstep run --help`"),
            (["plan", "--replicas", "x"], "lockstep: error: argument --replicas: invalid int "
                                          "value: 'x'; see `lockstep plan --help`"),
            (["runs", "-n"], "lockstep: error: argument -n/--limit: expected one argument; see "
                             "`lockstep runs --help`")):
        bad = lockstep(*argv, cwd=tmp_path)
        assert bad.returncode == 2 and bad.stdout == ""
        assert bad.stderr.splitlines() == [line], bad.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_error_about_the_users_code_is_one_line_without_tensorflows_start_up(tmp_path):
    """The user's module imports TensorFlow; its C++ start-up lines (logged as errors, which
    TF_CPP_MIN_LOG_LEVEL=2 lets through) must not come before lockstep's line."""
    (tmp_path / "broken.py").write_text("import tensorflow as tf\n\n\ndef model(a, b, c):\n"
                                        "    return a\n")
    config = tmp_path / "c.toml"
    config.write_text('[trainer]\nmodel = "broken:model"\n[paths]\npipeline_root = "root"\n')
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # the CLI's own
    bad = lockstep("run", "--config", config, cwd=tmp_path, env=env)
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "lockstep: error: trainer.model: broken:model(a, b, c) cannot be called with 1 "
        "argument(s) (missing a required argument: 'b')"], bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.py", "c.toml"]
