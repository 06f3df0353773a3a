"""The user's own code by dotted path (trainer_module/hooks.py): checked before anything runs,
one line naming the key and the reason; the user's preprocessing_fn under tf.Transform with the
label added by lockstep; an edit to the user's code changes the fingerprint TFX's cache sees."""

import tempfile
import textwrap

import pytest
import tensorflow as tf
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from pipeline import config as config_lib
from pipeline.config import ConfigError
from pipeline.use_cases import preparing
from trainer_module import features, hooks, preprocessing
from trainer_module.settings import CLASSIFICATION
from trainer_module.custom_config import TransformSpec

HOOKS = '''
import tensorflow as tf

def model(inputs, outputs=None):
    ins = {k: tf.keras.Input(shape=(), name=k) for k in inputs.numeric}
    x = tf.keras.layers.Concatenate()([tf.keras.layers.Reshape((1,))(v) for v in ins.values()])
    return tf.keras.Model(ins, tf.keras.layers.Dense(outputs or inputs.outputs)(x))

def two_outputs(inputs):
    return model(inputs, 2)

def not_a_model(inputs):
    return "model"

def loss(labels, outputs):
    return tf.keras.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=True)

def mean_loss(labels, outputs):
    return tf.reduce_mean(loss(labels, outputs))

auto_loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

def takes_three(a, b, c):
    return a

def preprocessing_fn(inputs):
    x = inputs["x"]
    x = tf.sparse.to_dense(tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]))[:, 0]
    return {"x_scaled": tft.scale_to_0_1(x)}

import tensorflow_transform as tft
'''


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_code")
    (root / "mine").mkdir()
    (root / "mine" / "__init__.py").write_text("")
    (root / "mine" / "hooks.py").write_text(textwrap.dedent(HOOKS))
    hooks.add_code_path(root)
    return root


def _config(tmp_path, trainer="", transform=""):
    path = tmp_path / "config.toml"
    path.write_text(f"[trainer]\n{trainer}\n[transform]\n{transform}\n[paths]\n"
                    f'pipeline_root = "{tmp_path}/root"\nserving_dir = "{tmp_path}/serving"\n')
    return config_lib.absolutize(config_lib.load(path))


@pytest.mark.parametrize("trainer, message", [
    ('model = "mine.hooks:nowhere"', "trainer.model: module 'mine.hooks' "),
    ('model = "nowhere.at_all:model"', "trainer.model: cannot import 'nowhere.at_all' "
                                       "(ModuleNotFoundError"),
    ('model = "mine.hooks:takes_three"', "trainer.model: mine.hooks:takes_three(a, b, c) cannot "
                                         "be called with 1 argument(s)"),
    ('model = "mine.hooks:not_a_model"', "trainer.model: mine.hooks:not_a_model returned a "
                                         "builtins.str, not a tf.keras.Model"),
    ('model = "mine.hooks:two_outputs"', "trainer.model: the model returns [2, 2] for a batch of "
                                         "2; it must return [2, 3] (logits, one per class)"),
    ('loss = "mine.hooks:mean_loss"', "trainer.loss: gives shape [] for a batch of 4; it must "
                                      "give one loss per example"),
    ('loss = "mine.hooks:auto_loss"', "trainer.loss: the Keras loss has reduction"),
    ('loss = "mine.hooks:takes_three"', "cannot be called with 2 argument(s)"),
])
def test_a_broken_hook_is_one_line_naming_the_key_before_anything_runs(user_code, tmp_path,
                                                                        trainer, message):
    config = _config(tmp_path, trainer)
    with pytest.raises(ConfigError) as err:
        preparing.prepare(config)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "root").exists()  # nothing ran, nothing was written


def test_a_malformed_path_is_refused_when_the_config_loads(tmp_path):
    with pytest.raises(ConfigError, match="transform.preprocessing_fn: 'not a path' is not a "
                                          "dotted path"):
        _config(tmp_path, transform='preprocessing_fn = "not a path"')


def test_good_hooks_are_checked_and_said(user_code, tmp_path):
    config = _config(tmp_path, 'model = "mine.hooks:model"\nloss = "mine.hooks:loss"')
    lines = preparing.prepare(config).lines()
    # Penguins' 5 numeric columns (z-score, missing flag, quantile position each), the codes of
    # its 3 integer columns and its 2 text columns: 20 features.
    assert ("lockstep: your code: trainer.loss = mine.hooks:loss (one loss per example); "
            "trainer.model = mine.hooks:model ([batch, 3] from 20 transformed features)") in lines


def test_the_config_files_directory_is_on_the_path(tmp_path, monkeypatch):
    (tmp_path / "beside_config.py").write_text(HOOKS.replace("import tensorflow_transform as tft",
                                                             ""))
    monkeypatch.setenv("PYTHONPATH", "")
    config = _config(tmp_path, 'loss = "beside_config:loss"')
    assert preparing.prepare(config).code
    import os
    assert str(tmp_path) in os.environ["PYTHONPATH"].split(os.pathsep)  # and in child processes


def test_an_edit_to_the_users_code_changes_the_fingerprint(tmp_path):
    (tmp_path / "edited").mkdir()
    (tmp_path / "edited" / "__init__.py").write_text("")
    module = tmp_path / "edited" / "model.py"
    module.write_text("def build(inputs):\n    return None\n")
    hooks.add_code_path(tmp_path)
    before = hooks.fingerprint("edited.model:build")
    assert len(before) == 16 and before == hooks.fingerprint("edited.model:build")
    module.write_text("def build(inputs):\n    return 1\n")
    assert hooks.fingerprint("edited.model:build") != before
    assert hooks.fingerprint("") == ""


def test_the_users_preprocessing_fn_runs_under_tf_transform_with_the_label_added(user_code):
    spec = TransformSpec("y", CLASSIFICATION, preprocessing_fn="mine.hooks:preprocessing_fn")
    feature_spec = {"x": tf.io.VarLenFeature(tf.float32), "y": tf.io.VarLenFeature(tf.string)}
    rows = [{"x": [1.0], "y": [b"a"]}, {"x": [3.0], "y": [b"b"]}, {"x": [], "y": [b"a"]}]
    with tempfile.TemporaryDirectory() as tmp, tft_beam.Context(temp_dir=tmp):
        metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(feature_spec))
        (out, _), _ = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            lambda inputs: preprocessing.preprocessing_fn(inputs, spec.to_custom_config()))
    assert [sorted(r) for r in out] == [["x_scaled", features.transformed_name("y")]] * 3
    assert [r["x_scaled"] for r in out] == [pytest.approx(1 / 3), 1.0, 0.0]
    assert [r["y_xf"] for r in out] == [0, 1, 0]
