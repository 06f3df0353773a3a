"""What a local schedule starts, as processes: the crontab entry's command run by a shell, one run
per pipeline root (the run lock, status 3), a run timeout (status 4) (the entry itself, through
the CLI's main: tests/unit/test_local_schedule_entry.py)."""

import os
import re
import subprocess
import time

import pytest

from conftest import REPO, cli, lockstep
from pipeline.local import run_lock
from unit.test_local_schedule_entry import _env

pytestmark = pytest.mark.slow  # lockstep processes


def test_a_scheduled_run_with_a_missing_root_starts_and_logs(tmp_path, monkeypatch):
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    root = tmp_path / "not yet" / "root"
    config = tmp_path / "c.toml"
    config.write_text(f'[data]\nlabel = "no_such_column"\n[paths]\npipeline_root = "{root}"\n')
    result = cli("schedule", "--local", "--cron", "0 3 * * *", "--config", config,
                 cwd=REPO)
    assert result.returncode == 0, result.stderr
    import shutil

    shutil.rmtree(tmp_path / "not yet")  # removed after scheduling: the entry must cope
    [entry] = (tmp_path / "tab").read_text().splitlines()
    command = re.sub(r"^(\S+ ){5}", "", entry).rsplit(" # lockstep-schedule:", 1)[0]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    cron = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True,
                          timeout=300)
    assert cron.returncode == 2, (cron.stdout, cron.stderr)  # lockstep's own input error
    log = (root / "logs" / "schedule.log").read_text()
    assert "label column 'no_such_column' is not in the header" in log, log


def test_a_second_run_exits_3_and_says_who_holds_the_lock(tmp_path):
    root = tmp_path / "root"
    with run_lock.hold(run_lock.default_path(str(root))):
        tic = time.monotonic()
        second = lockstep("run", "--pipeline-root", root, "--serving-dir", tmp_path / "serving",
                          "--wait", "2")
        waited = time.monotonic() - tic
    assert second.returncode == 3, second.stderr
    [line] = second.stderr.strip().splitlines()
    assert line.startswith(f"lockstep: error: another lockstep run holds {root / 'run.lock'}: "
                           f"pid {os.getpid()} on "), line
    assert "running since" in line and "(waited 2s)" in line, line
    assert waited >= 2
    assert not (tmp_path / "serving").exists() and not (root / "metadata.sqlite").exists()
    with run_lock.hold(run_lock.default_path(str(root))):  # released: it can be taken again
        pass


def test_a_run_past_its_timeout_stops_with_status_4_and_frees_the_lock(tmp_path):
    root = tmp_path / "root"
    result = lockstep("run", "--pipeline-root", root, "--serving-dir", tmp_path / "serving",
                      "--timeout-minutes", "0.05")
    assert result.returncode == 4, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.strip().splitlines()[-1] == (
        "lockstep: error: the run took longer than 0.05 min (run.timeout_minutes); stopped")
    with run_lock.hold(run_lock.default_path(str(root))):
        pass
