"""The fork server the tests run `lockstep run` from (tests/forked_cli.py): its child is a run as a
fresh `python -m pipeline.cli run` process is, as far as the tests read one: its exit status and
output, its working directory, environment and argv, a signal's status, a worker lane forked from
it, and nothing shared between two children. So is its `python SCRIPT` or `python -m MODULE`
child (a training test's worker process)."""

import os
import re
import signal
import subprocess

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from forked_cli import Server

    log = tmp_path_factory.mktemp("server") / "server.log"
    server = Server(dict(os.environ, PYTHONPATH=str(REPO)), log)
    yield server
    server.close()


def _argv_probe(tmp_path):
    """A config whose hook module prints what the process it runs in has, then fails the run."""
    (tmp_path / "probe.py").write_text(
        "import os, sys\n"
        "print('argv', sys.argv[0], 'cwd', os.getcwd(), 'path0', sys.path[0], 'probe',\n"
        "      os.environ.get('LOCKSTEP_PROBE'), flush=True)\n"
        "def model(a, b):\n    return a\n")
    (tmp_path / "c.toml").write_text('[trainer]\nmodel = "probe:model"\n[paths]\n'
                                     'pipeline_root = "root"\n')


def test_a_child_runs_the_cli_where_and_as_it_was_asked(server, tmp_path, monkeypatch):
    _argv_probe(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO), LOCKSTEP_PROBE="here")
    result = server.run(["run", "--config", "c.toml"], tmp_path, env, 120, tmp_path)
    assert result.returncode == 2, result.stderr  # the hook's signature: a one-line error
    assert (f"argv {REPO}/pipeline/cli/__main__.py cwd {tmp_path} path0 {tmp_path} probe here"
            in result.stdout), result.stdout
    assert result.stderr.splitlines()[-1].startswith("lockstep: error: trainer.model: probe:model")


def test_a_signal_ends_a_child_as_it_ends_a_process(server, tmp_path):
    """A run waiting for a held lock, SIGKILLed: subprocess's returncode for it, -9; and an
    unbuffered child's stdout (PYTHONUNBUFFERED, as a fresh interpreter takes it) is read line by
    line as it writes it."""
    import fcntl

    with open(tmp_path / "held.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        child = server.start(["run", "--pipeline-root", str(tmp_path / "root"), "--wait", "60",
                              "--lock", str(tmp_path / "held.lock")], tmp_path,
                             dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1"),
                             tmp_path)
        first = child.stdout.readline()
        assert first.startswith("lockstep: ") and first.endswith("\n"), first
        assert child.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.5)
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    out, err = child.communicate()
    assert "lockstep" in first + out and err == "", (out, err)


def test_a_python_child_runs_a_script_or_a_module_as_the_interpreter_would(server, tmp_path):
    """`python SCRIPT ARGS` and `python -m MODULE ARGS` as the training tests' worker processes
    are started (conftest's python_started): __main__ with the interpreter's argv and
    sys.path[0], the environment asked for, stderr written with stdout in order, sys.exit's
    status, and an exception's traceback with status 1."""
    (tmp_path / "probe.py").write_text(
        "import os, sys\n"
        "print('argv', sys.argv, 'path0', sys.path[0], 'name', __name__, 'config',\n"
        "      os.environ.get('TF_CONFIG'), flush=True)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "if sys.argv[1:] == ['boom']:\n    raise ValueError('boom')\n"
        "sys.exit(int(sys.argv[1]))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CONFIG='{"task": 1}')
    script = server.start([str(tmp_path / "probe.py"), "7"], tmp_path, env, tmp_path, python=True)
    out, err = script.communicate(timeout=120)
    assert script.returncode == 7 and err is None, out
    assert out.splitlines() == [f"argv ['{tmp_path}/probe.py', '7'] path0 {tmp_path} name "
                                '__main__ config {"task": 1}', "to stderr"], out
    raised = server.start([str(tmp_path / "probe.py"), "boom"], tmp_path, env, tmp_path,
                          python=True)
    out, _ = raised.communicate(timeout=120)
    assert raised.returncode == 1 and out.rstrip().endswith("ValueError: boom"), out
    module = server.start(["-m", "probe", "3"], tmp_path, env, tmp_path, python=True)
    out, _ = module.communicate(timeout=120)
    assert module.returncode == 3, out
    assert out.startswith(f"argv ['{tmp_path}/probe.py', '3'] path0 {tmp_path} name __main__")


@pytest.mark.slow
def test_a_forked_run_forks_its_worker_and_two_runs_share_nothing(tmp_path):
    """Two runs of the bundled data through conftest's `lockstep`: each completes, forks its
    worker lane from itself, and the second finds the first's cache (one root): separate
    processes, not one process's state twice."""
    from conftest import PipelineRun

    run = PipelineRun(tmp_path)
    first, second = run.run(), run.run()
    assert first.returncode == second.returncode == 0, (first.stderr + second.stderr)[-3000:]
    parents = []
    for result in (first, second):
        [log] = re.findall(r"library logs go to (\S+)", result.stdout)
        [parent] = re.findall(r"Node worker: process \d+, forked from (\d+)", open(log).read())
        parents.append(parent)
    assert parents[0] != parents[1]
    assert re.search(r"^  Transform +cached", second.stdout, re.M), second.stdout
