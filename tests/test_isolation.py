"""What one test module leaves in a pytest worker does not reach the next one's fixtures: a module
starts with TensorFlow's global seed unset, as a fresh process has it, before its own
module-scoped fixtures run (tests/conftest.py). A reference trained once for a module
(test_synchronous_training's Keras `fit`) otherwise took its shuffle's order from the seed an
earlier module's training set, and each equivalence test of the module failed against it."""

import os
import subprocess
import sys

from conftest import REPO

SEEDING = """
def test_trains_with_a_seed():
    import tensorflow as tf
    tf.keras.utils.set_random_seed(7)  # as trainer_module/train.py does
"""
READING = """
import pytest
import tensorflow as tf


def _order():
    return list(tf.data.Dataset.range(20).shuffle(20, seed=3).as_numpy_iterator())


@pytest.fixture(scope="module")
def reference():
    return _order()


def test_the_modules_fixture_saw_what_the_test_sees(reference):
    assert reference == _order()
"""


def test_a_modules_fixtures_start_unseeded_whatever_ran_before(tmp_path):
    (tmp_path / "test_a_seeding.py").write_text(SEEDING)
    (tmp_path / "test_b_reading.py").write_text(READING)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         "-p", "conftest", "--rootdir", str(tmp_path), str(tmp_path / "test_a_seeding.py"),
         str(tmp_path / "test_b_reading.py")], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=300)
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout[-3000:]
