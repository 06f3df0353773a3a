"""preprocessing_fn on a small dataset, through tf.Transform's Beam implementation: numeric,
string, missing and label columns, for both tasks."""

import math
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from trainer_module import features, preprocessing
from trainer_module.config import CLASSIFICATION, REGRESSION, TransformSpec

FEATURE_SPEC = {"x": tf.io.VarLenFeature(tf.float32), "color": tf.io.VarLenFeature(tf.string),
                "n": tf.io.VarLenFeature(tf.int64), "y": tf.io.VarLenFeature(tf.int64)}
ROWS = [{"x": [1.0], "color": [b"red"], "n": [], "y": [3]},
        {"x": [3.0], "color": [b"blue"], "n": [100], "y": [7]},
        {"x": [], "color": [b"red"], "n": [200], "y": [3]},  # x missing
        {"x": [5.0], "color": [], "n": [600], "y": []}]  # color and label missing


def _transform(task):
    spec = TransformSpec("y", task).to_custom_config()
    with tempfile.TemporaryDirectory() as tmp, tft_beam.Context(temp_dir=tmp):
        metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(FEATURE_SPEC))
        (rows, _), _ = (ROWS, metadata) | tft_beam.AnalyzeAndTransformDataset(
            lambda inputs: preprocessing.preprocessing_fn(inputs, spec))
    return rows


@pytest.mark.parametrize("task", [CLASSIFICATION, REGRESSION])
def test_numeric_string_and_missing_columns(task):
    rows = _transform(task)
    x = [r[features.transformed_name("x")] for r in rows]
    # The missing x is filled with the mean (3.0), then z-scored: mean 0.
    assert np.isclose(np.mean(x), 0.0, atol=1e-6) and np.isclose(x[2], 0.0, atol=1e-6)
    assert x[0] < x[2] < x[3]
    assert [r[features.missing_flag_name("x")] for r in rows] == [0.0, 0.0, 1.0, 0.0]
    # Each numeric column has its own statistics: n's missing cell is n's mean (300), not x's.
    filled = np.array([300.0, 100.0, 200.0, 600.0])
    expected = (filled - filled.mean()) / filled.std()
    assert np.allclose([r[features.transformed_name("n")] for r in rows], expected, atol=1e-5)
    assert [r[features.missing_flag_name("n")] for r in rows] == [1.0, 0.0, 0.0, 0.0]
    colors = [r[features.transformed_name("color")] for r in rows]
    assert colors[0] == colors[2] != colors[1] != colors[3]  # red, blue, and missing apart


def test_label_by_task():
    classes = [r["y_xf"] for r in _transform(CLASSIFICATION)]
    assert classes[0] == classes[2] != classes[1] and classes[3] == -1  # missing: -1, no class
    assert set(classes[:3]) == {0, 1}
    values = [r["y_xf"] for r in _transform(REGRESSION)]
    assert values[:3] == [3.0, 7.0, 3.0] and math.isnan(values[3])  # an integer label as a value
