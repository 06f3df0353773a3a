"""The command's exit (pipeline/cli `exit_now`): Python's exit without the interpreter's teardown;
what that exit does for the user still happens."""

import subprocess
import sys
import textwrap

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


def test_the_command_exits_with_its_status(tmp_path):
    ok = lockstep("--help")
    assert ok.returncode == 0 and "lockstep" in ok.stdout
    bad = lockstep("plan", "--config", tmp_path / "missing.toml")
    assert bad.returncode != 0 and "missing.toml" in bad.stderr
