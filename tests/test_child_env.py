"""trainer_module/child_env.py: a child Python process's environment imports what this one does."""

import os
import subprocess
import sys

from trainer_module import child_env


def test_pythonpath_keeps_the_users_entries_first_then_the_paths_then_lockstep_once(
        monkeypatch, tmp_path):
    hooks = str(tmp_path / "hooks")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([hooks, "", child_env.PACKAGE_ROOT]))
    env = child_env.python_env(["/extra", hooks], TF_USE_LEGACY_KERAS="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [hooks, child_env.PACKAGE_ROOT, "/extra"]
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env["HOME"] == os.environ["HOME"]
    monkeypatch.delenv("PYTHONPATH")
    assert child_env.python_env()["PYTHONPATH"] == child_env.PACKAGE_ROOT


def test_a_child_started_elsewhere_imports_lockstep_and_the_users_code(monkeypatch, tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "my_hooks.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "hooks"))
    out = subprocess.run(
        [sys.executable, "-c", "import my_hooks, trainer_module.child_env; print(my_hooks.VALUE)"],
        env=child_env.python_env(), cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "7"
