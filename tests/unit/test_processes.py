"""trainer_module/processes.py: a child Python process's environment imports what this one does."""

import os
import subprocess
import sys

from trainer_module import processes


def test_pythonpath_keeps_the_users_entries_first_then_the_paths_then_lockstep_once(
        monkeypatch, tmp_path):
    hooks = str(tmp_path / "hooks")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([hooks, "", processes.PACKAGE_ROOT]))
    env = processes.python_env(["/extra", hooks], TF_USE_LEGACY_KERAS="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [hooks, processes.PACKAGE_ROOT, "/extra"]
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env["HOME"] == os.environ["HOME"]
    monkeypatch.delenv("PYTHONPATH")
    assert processes.python_env()["PYTHONPATH"] == processes.PACKAGE_ROOT


def test_a_child_started_elsewhere_imports_lockstep_and_the_users_code(monkeypatch, tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "my_hooks.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "hooks"))
    out = subprocess.run(
        [sys.executable, "-c", "import my_hooks, trainer_module.processes; print(my_hooks.VALUE)"],
        env=processes.python_env(), cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "7"


def test_free_ports_are_distinct_and_can_be_bound():
    import socket

    ports = processes.free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
