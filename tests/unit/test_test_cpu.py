"""tools/test_cpu.py: each test's CPU counted in the process that spent it, its own, a reaped
child's or a live descendant's, and the report of the rows. Shown on a fresh `pytest` of three
planted tests."""

import json
import os
import signal
import subprocess
import sys

from conftest import REPO

PLANTED = '''
import subprocess, sys, time

BURN = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass"


def _burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_own():
    _burn(0.6)


def test_reaped_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)


def test_live_descendant():  # still running as the test ends: read from /proc
    child = subprocess.Popen([sys.executable, "-c", BURN + "\\ntime.sleep(60)"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and child.poll() is None:
        with open(f"/proc/{child.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        if int(fields[11]) + int(fields[12]) >= 0.6 * 100:
            break
        time.sleep(0.05)
    with open("child.pid", "w") as pid:  # ended by the test that planted this one
        pid.write(str(child.pid))
'''


def test_each_test_is_charged_the_cpu_its_processes_spent(tmp_path):
    (tmp_path / "test_planted.py").write_text(PLANTED)
    rows_dir = tmp_path / "rows"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "tools"),
           "LOCKSTEP_TEST_CPU_DIR": str(rows_dir)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-p", "test_cpu", "-c", "/dev/null", str(tmp_path)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    if (tmp_path / "child.pid").exists():
        os.kill(int((tmp_path / "child.pid").read_text()), signal.SIGKILL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [rows_file] = rows_dir.glob("rows.*.jsonl")
    rows = {json.loads(line)["test"].split("::")[-1]: json.loads(line)
            for line in rows_file.read_text().splitlines()}
    assert set(rows) == {"test_own", "test_reaped_child", "test_live_descendant"}
    assert rows["test_own"]["self"] >= 0.5 and rows["test_own"]["children"] < 0.1
    assert rows["test_reaped_child"]["children"] >= 0.5
    assert rows["test_live_descendant"]["live"] >= 0.5
    for row in rows.values():
        assert row["cpu"] >= 0.5 and row["cpu"] == row["self"] + row["children"] + row["live"]

    out = subprocess.run([sys.executable, str(REPO / "tools" / "test_cpu.py"), str(rows_dir)],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0].startswith("3 tests, ") and "test_planted.py" in out, out
