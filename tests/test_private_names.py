"""tools/private_names.py, the lint rule behind the walls (components/compat/, and
trainer_module/tf_internals.py for TensorFlow): nothing outside them uses a private name of TFX,
tfx_bsl, TFMA, tf.Transform, KFP, ML Metadata, TensorFlow or tf-keras (or TensorFlow's internal
modules), or rebinds one of their names; and each kind of use, planted, is found at its line (and
nothing else is)."""

import subprocess
import sys
from pathlib import Path

from lint_tool import load_lint

REPO = Path(__file__).resolve().parent.parent


lint = load_lint()

# Each line marked `# finds NAME` must be found, with that name; no other line may be.
PLANTED = '''\
import os, kfp.local._internal  # finds kfp.local._internal
from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as mpv
from tfx_bsl.tfxio import _internal  # finds _internal
from tfx.components.util import tfxio_utils
from tfx.components.transform import executor as transform_executor
from tfx.dsl.components.base import base_executor
from components.compat.swapped import swapped

fanout = mpv._COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT  # finds _COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT
combine = getattr(mpv, "_ComputationsCombineFn")  # finds _ComputationsCombineFn
evaluator = mpv.MetricsAndPlotsEvaluator
tfxio_utils.make_tfxio = None  # finds make_tfxio
setattr(tfxio_utils, "make_tfxio", None)  # finds make_tfxio
monkeypatch.setattr("tfx.components.util.tfxio_utils.make_tfxio", None)  # finds
with swapped(mpv, "MetricsAndPlotsEvaluator", None):  # finds MetricsAndPlotsEvaluator
    pass
TABLE = [(tfxio_utils, "make_tfxio", None)]  # finds make_tfxio
os._exit


class Processor(transform_executor.TransformProcessor):
    def _MakeDatasetList(self, *args):  # finds _MakeDatasetList
        return super()._MakeDatasetList(*args)  # finds _MakeDatasetList

    def _mine(self):
        return self._keys


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        self._keys = self._get_tmp_dir()  # TFX's executor contract: allowed
        return self._extra_flags  # finds _extra_flags


def fill(combiner, record):
    return combiner._num_buckets, record._mine  # finds _num_buckets
'''


def _expected(text: str) -> set[tuple[int, str]]:
    marked = set()
    for line, source in enumerate(text.splitlines(), 1):
        if "# finds" in source:
            marked.add((line, source.split("# finds", 1)[1].strip()))
    return marked


def test_each_kind_of_private_use_is_found_at_its_line_and_nothing_else(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    found = {(f.line, f.name) for f in lint.findings([str(planted)])}
    assert found == _expected(PLANTED)


def test_the_command_names_file_and_line_and_fails(tmp_path, capsys):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    assert lint.main([str(planted)]) == 1
    out = capsys.readouterr().out
    assert f"{planted}:3: imports tfx_bsl.tfxio._internal" in out
    assert f"{planted}:22: Processor overrides " \
           "tfx.components.transform.executor.TransformProcessor._MakeDatasetList" in out
    clean = tmp_path / "clean.py"
    clean.write_text("from tfx.dsl.io import fileio\nfileio.exists('x')\n")
    assert lint.main([str(clean)]) == 0


# TensorFlow's: its internal modules and tf.__internal__ count, a private name set by its classes
# counts on an object of unknown type unless a lockstep class sets the same name too.
PLANTED_TF = '''\
import tensorflow as tf
from tensorflow.python.eager import context  # finds context
from tensorflow.core.util import event_pb2
import tensorflow.python.distribute.numpy_dataset  # finds tensorflow.python.distribute.numpy_dataset

base = tf.__internal__.tracking.Trackable  # finds __internal__
rules = tf.keras.layers.Dense
resolver = strategy._cluster_resolver  # finds _cluster_resolver
started = worker._process  # lockstep's own classes set self._process
sys.modules["tensorflow"] = None
'''


def test_tensorflows_internals_are_found_too(tmp_path):
    planted = tmp_path / "planted_tf.py"
    planted.write_text(PLANTED_TF)
    found = {(f.line, f.name) for f in lint.findings([str(planted)])}
    assert found == _expected(PLANTED_TF)


def test_the_wall_itself_is_not_checked():
    paths = ["components/compat/tfma.py", "components/evaluator.py",
             str(REPO / "components/compat/tfx.py"), "trainer_module/tf_internals.py",
             "trainer_module/strategy.py"]
    assert lint.outside_wall(paths) == ["components/evaluator.py", "trainer_module/strategy.py"]


def test_nothing_outside_the_wall_uses_their_private_names():
    """What `make lint` runs, in a fresh process that imports none of their packages."""
    result = subprocess.run([sys.executable, "-X", "importtime", "tools/private_names.py"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"tensorflow", "apache_beam", *lint.PACKAGES}
