"""The unit tier's rule (tests/conftest.py): a test under tests/unit is marked `unit`, and one
that imports TensorFlow, at its module's import or while it runs, fails naming itself. Shown on
a copy of the real conftest in a fresh pytest, with a stand-in `tensorflow` module (the rule
looks for the name, and a real import would take seconds)."""

import shutil
import subprocess
import sys

from conftest import REPO

RULE = "imported tensorflow; the unit tier never does"


def _pytest(tmp_path, *args) -> subprocess.CompletedProcess:
    tests = tmp_path / "tests"
    (tests / "unit").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "conftest.py", tests / "conftest.py")
    (tests / "unit" / "__init__.py").write_text("")
    (tests / "unit" / "test_at_import.py").write_text(
        "import tensorflow\n\n\ndef test_nothing():\n    pass\n")
    (tests / "unit" / "test_while_running.py").write_text(
        "def test_imports_it():\n    import tensorflow  # noqa: F401\n\n\n"
        "def test_clean():\n    import json  # noqa: F401\n")
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "tensorflow.py").write_text(  # what conftest calls once it is in
        "class random:\n    set_seed = staticmethod(lambda seed: None)\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "unit", *args],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "standin"), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120)


def test_a_module_that_imports_tensorflow_fails_to_collect_naming_itself(tmp_path):
    result = _pytest(tmp_path, "tests/unit/test_at_import.py")
    assert result.returncode != 0
    assert f"importing tests/unit/test_at_import.py {RULE}" in result.stdout, result.stdout


def test_a_test_that_imports_tensorflow_fails_and_the_others_pass_marked_unit(tmp_path):
    result = _pytest(tmp_path, "tests/unit/test_while_running.py")
    assert result.returncode == 1, result.stdout
    assert f"tests/unit/test_while_running.py::test_imports_it {RULE}" in result.stdout
    assert "1 failed, 1 passed" in result.stdout, result.stdout  # -m unit selected both
