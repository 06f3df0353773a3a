"""preprocessing_fn on a small dataset, through tf.Transform's Beam implementation: numeric,
string, missing and label columns, for both tasks."""

import copy
import functools
import math
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from trainer_module import cells, features, preprocessing
from trainer_module.settings import CLASSIFICATION, REGRESSION
from trainer_module.custom_config import TransformSpec

FEATURE_SPEC = {"x": tf.io.VarLenFeature(tf.float32), "color": tf.io.VarLenFeature(tf.string),
                "n": tf.io.VarLenFeature(tf.int64), "y": tf.io.VarLenFeature(tf.int64)}
ROWS = [{"x": [1.0], "color": [b"red"], "n": [], "y": [3]},
        {"x": [3.0], "color": [b"blue"], "n": [100], "y": [7]},
        {"x": [], "color": [b"red"], "n": [200], "y": [3]},  # x missing
        {"x": [5.0], "color": [], "n": [600], "y": []}]  # color and label missing


def _transform(task, packed=False):
    """The rows preprocessing_fn makes of ROWS under tf.Transform, for that task (`packed`: the
    numeric columns in one tensor): one Beam run each, shared by the tests that read them (a
    copy each)."""
    return copy.deepcopy(_transformed(task, packed))


@functools.cache
def _transformed(task, packed):
    spec = TransformSpec("y", task, packed=packed).to_custom_config()
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


def test_quantile_positions_and_integer_codes():
    """Each numeric column's place among its quantiles (the model's piecewise-linear encoding):
    0 when missing, rising with the value, at most QUANTILE_BINS; a missing cell is not a
    value the quantiles count. An integer column is also a code: one index per value."""
    rows = _transform(CLASSIFICATION)
    x = [r[features.position_name("x")] for r in rows]
    assert x[2] == 0.0  # missing
    assert 0 < x[0] < x[1] < x[3] <= features.QUANTILE_BINS
    assert x[3] == features.QUANTILE_BINS  # the largest value is at or past the last edge
    n = [r[features.position_name("n")] for r in rows]
    assert n[0] == 0.0 and 0 < n[1] < n[2] < n[3] <= features.QUANTILE_BINS
    codes = [r[features.code_name("n")] for r in rows]
    assert len(set(codes)) == 4  # 100, 200, 600 and the missing cell, each its own index
    assert features.code_name("x") not in rows[0]  # floats are measured, not named


def test_packed_numeric_columns_are_their_features_in_the_models_order():
    """For the built-in model (TransformSpec.packed) every numeric column's position, z-score
    and missing flag come in one [columns, 3] tensor a row, the columns in the order of their
    safe names (n before x, though x comes first among the inputs): the values the per-column
    features hold, exactly; the codes and the text stay features of their own."""
    rows, packed = _transform(CLASSIFICATION), _transform(CLASSIFICATION, packed=True)
    for row, out in zip(rows, packed):
        expected = [[row[features.position_name(c)], row[features.transformed_name(c)],
                     row[features.missing_flag_name(c)]] for c in ("n", "x")]
        assert np.asarray(out[features.NUMERIC_COLUMNS]).tolist() == expected
        assert out[features.code_name("n")] == row[features.code_name("n")]
        assert out[features.transformed_name("color")] == row[features.transformed_name("color")]
        assert not {features.transformed_name("x"), features.position_name("n")} & set(out)


def test_a_coded_float_is_also_a_code_named_by_its_value(tmp_path):
    """A coded float (TransformSpec.coded: few values, each in many rows) is a number as every
    float is, and a code as an integer is: one index per value, exact (14.07 and 14.08 apart,
    -0.5 and 0.5 apart), a missing cell its own; the transform a server applies names a raw
    value as training did. A float not coded has no code."""
    import tensorflow_transform as tft

    rates = [14.07, 14.08, 14.07, None, -0.5, 0.5, 14.08, 14.07]
    rows = [{"rate": [] if r is None else [r], "other": [float(i)], "y": [i % 2]}
            for i, r in enumerate(rates)]
    spec = {"rate": tf.io.VarLenFeature(tf.float32), "other": tf.io.VarLenFeature(tf.float32),
            "y": tf.io.VarLenFeature(tf.int64)}
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    config = TransformSpec("y", CLASSIFICATION, coded=("rate",)).to_custom_config()
    with tft_beam.Context(temp_dir=str(tmp_path / "tmp")):
        (out, _), transform_fn = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            lambda inputs: preprocessing.preprocessing_fn(inputs, config))
        _ = transform_fn | tft_beam.WriteTransformFn(str(tmp_path / "fn"))
    codes = [r[features.code_name("rate")] for r in out]
    assert codes[0] == codes[2] == codes[7] and codes[1] == codes[6]
    assert len({codes[0], codes[1], codes[3], codes[4], codes[5]}) == 5
    assert codes[0] == 0 and codes[1] == 1  # the most frequent value first
    assert features.code_name("other") not in out[0]
    assert [r[features.missing_flag_name("rate")] for r in out][3] == 1.0  # a number still
    served = tft.TFTransformOutput(str(tmp_path / "fn")).transform_raw_features(
        {"rate": tf.sparse.from_dense(tf.constant([[14.08], [14.07], [0.5]])),
         "other": tf.sparse.from_dense(tf.constant([[1.0], [2.0], [3.0]]))})
    assert served[features.code_name("rate")].numpy().tolist() == [codes[1], codes[0], codes[5]]


def test_label_by_task():
    classes = [r["y_xf"] for r in _transform(CLASSIFICATION)]
    assert classes[0] == classes[2] != classes[1] and classes[3] == -1  # missing: -1, no class
    assert set(classes[:3]) == {0, 1}
    # An integer label as a value, standardized by the labeled rows' mean (13/3) and standard
    # deviation (sqrt(32/9)); missing stays NaN.
    values = [r["y_xf"] for r in _transform(REGRESSION)]
    std = math.sqrt(32 / 9)
    assert values[:3] == pytest.approx([(3 - 13 / 3) / std, (7 - 13 / 3) / std,
                                        (3 - 13 / 3) / std], rel=1e-6)
    assert math.isnan(values[3])


@pytest.mark.slow
def test_string_vocabularies_are_the_files_tft_vocabulary_writes(tmp_path, monkeypatch):
    """The built-in rules use tf.Transform's approximate vocabulary (its analyzers pack into one
    Beam stage); below VOCABULARY_TOP_K distinct values each file equals tft.vocabulary's: the
    same values in the same order (count descending, ties in reverse byte order)."""
    import tensorflow_transform as tft

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in rng.zipf(1.5, 3000) % 400]  # Zipf-like, with ties among rare ones
    rows = [{"s": [w.encode()], "t": [words[-1 - i].encode()], "y": [i % 3]}
            for i, w in enumerate(words)]
    spec = {"s": tf.io.VarLenFeature(tf.string), "t": tf.io.VarLenFeature(tf.string),
            "y": tf.io.VarLenFeature(tf.int64)}
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    config = TransformSpec("y", CLASSIFICATION).to_custom_config()

    def exact(inputs):
        out = {}
        for key in ("s", "t"):
            value = cells.dense(inputs[key], features.MISSING_TOKEN)
            out[key] = tft.compute_and_apply_vocabulary(
                value, num_oov_buckets=features.OOV_BUCKETS, vocab_filename=features.vocab_name(key))
        return out

    def vocabularies(fn, directory) -> dict[str, list[bytes]]:
        with tft_beam.Context(temp_dir=str(tmp_path / "tmp")):
            transform_fn = (rows, metadata) | tft_beam.AnalyzeDataset(fn)
            _ = transform_fn | tft_beam.WriteTransformFn(str(directory))
        output = tft.TFTransformOutput(str(directory))
        return {k: output.vocabulary_by_name(features.vocab_name(k)) for k in ("s", "t")}

    ours = vocabularies(lambda inputs: preprocessing.preprocessing_fn(inputs, config), tmp_path / "a")
    reference = vocabularies(exact, tmp_path / "b")
    assert ours == reference and len(ours["s"]) > 100
    # Past the limit the vocabulary keeps about the most frequent (Misra-Gries counts are lower
    # bounds: the order among the middling ones may differ); the rest share the OOV bucket.
    monkeypatch.setattr(preprocessing, "VOCABULARY_TOP_K", 50)
    capped = vocabularies(lambda inputs: preprocessing.preprocessing_fn(inputs, config),
                          tmp_path / "c")
    assert len(capped["s"]) == 50 and capped["s"][:10] == reference["s"][:10]
    assert set(capped["s"]) < set(reference["s"])


def test_a_large_categorical_column_keeps_each_value_seen_often_enough(tmp_path):
    """A large column (TransformSpec.large, text or integer): each value seen at least min_count
    times gets its own index, the vocabulary the hashed prefix (its size + the hash buckets tells
    the model its table); a value seen less often, or never, one of features.HASH_BUCKETS buckets
    past them, by a hash of its text (a server hashes as training did). max_vocabulary caps every
    column."""
    import tensorflow_transform as tft

    users = ["u1"] * 3 + ["u2"] * 2 + ["u3", "u4", "u5"]
    rows = [{"user": [u.encode()], "n": [int(u[1:]) * 1000], "y": [i % 2]}
            for i, u in enumerate(users)]
    spec = {"user": tf.io.VarLenFeature(tf.string), "n": tf.io.VarLenFeature(tf.int64),
            "y": tf.io.VarLenFeature(tf.int64)}
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    config = TransformSpec("y", CLASSIFICATION, large=("user", "n"), min_count=2).to_custom_config()
    with tft_beam.Context(temp_dir=str(tmp_path / "tmp")):
        (out, _), transform_fn = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            lambda inputs: preprocessing.preprocessing_fn(inputs, config))
        _ = transform_fn | tft_beam.WriteTransformFn(str(tmp_path / "fn"))
    output = tft.TFTransformOutput(str(tmp_path / "fn"))
    assert output.vocabulary_by_name(features.hashed_vocab_name("user")) == [b"u1", b"u2"]
    assert output.vocabulary_by_name(features.kept_codes_name("n")) == [b"1000", b"2000"]
    for feature in (features.transformed_name("user"), features.code_name("n")):
        index = [r[feature] for r in out]
        assert index[:5] == [0, 0, 0, 1, 1]  # kept: their own rows
        assert all(2 <= i < 2 + features.HASH_BUCKETS for i in index[5:])  # rare: a bucket each
        assert len(set(index[5:])) > 1  # hashed apart (3 values, 1,000 buckets)
    capped = TransformSpec("y", CLASSIFICATION, max_vocabulary=1).to_custom_config()
    with tft_beam.Context(temp_dir=str(tmp_path / "tmp2")):
        (out, _), _ = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            lambda inputs: preprocessing.preprocessing_fn(inputs, capped))
    assert {r[features.transformed_name("user")] for r in out} == {0, 1}  # u1, or the OOV bucket


def test_an_integer_code_keeps_as_many_values_as_text_does(tmp_path):
    """An integer column's code keeps its values up to VOCABULARY_TOP_K, as a text column's
    vocabulary does, not the CODE_TOP_K of a coded float: a panel's person id of 6,127 values,
    each in ~3 rows (COUNT's rwm5yr: held-out AUC 0.8963 -> 0.9385 with every person a code),
    is one index per value past the first CODE_TOP_K, and a server's raw value finds its own."""
    import tensorflow_transform as tft

    values = features.CODE_TOP_K + 300
    rows = [{"person": [1000 + i % values], "y": [i % 2]} for i in range(2 * values)]
    spec = {"person": tf.io.VarLenFeature(tf.int64), "y": tf.io.VarLenFeature(tf.int64)}
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    config = TransformSpec("y", CLASSIFICATION).to_custom_config()
    with tft_beam.Context(temp_dir=str(tmp_path / "tmp")):
        (out, _), transform_fn = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            lambda inputs: preprocessing.preprocessing_fn(inputs, config))
        _ = transform_fn | tft_beam.WriteTransformFn(str(tmp_path / "fn"))
    codes = [r[features.code_name("person")] for r in out]
    assert len(set(codes)) == values and max(codes) == values - 1  # no value in the OOV bucket
    output = tft.TFTransformOutput(str(tmp_path / "fn"))
    assert output.vocabulary_size_by_name(features.code_vocab_name("person")) == values
    served = output.transform_raw_features(
        {"person": tf.sparse.from_dense(tf.constant([[1000 + values - 1], [1000]], tf.int64))})
    assert served[features.code_name("person")].numpy().tolist() == [codes[values - 1], codes[0]]
