"""Target statistics (trainer_module/target_statistics.py): each text or code value's fit rows'
labels, counted by fold, give a row in training its value's mean over the other folds and, in
inference, over all of them; a row's own label never reaches its own feature in training; the
served model carries the counts; N replicas train as one device with them (lockstep verify,
tests/test_equivalence.py's run on the bundled data counts them too)."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import model as model_lib, settings, target_statistics

TABLES = [["city_xf", 7], ["id_code", 40]]
ROWS = 600


def _data(seed=0, classes=2):
    rng = np.random.default_rng(seed)
    x = {"city_xf": rng.integers(0, 7, ROWS), "id_code": rng.integers(0, 40, ROWS),
         "n_xf": rng.normal(size=ROWS).astype("float32")}
    y = (x["id_code"] % classes + (rng.uniform(size=ROWS) < 0.2)) % classes
    return x, y.astype("int64")


def _layer(width=1):
    inputs = {"city_xf": tf.keras.Input((), dtype=tf.int64, name="city_xf"),
              "id_code": tf.keras.Input((), dtype=tf.int64, name="id_code"),
              "n_xf": tf.keras.Input((), dtype=tf.float32, name="n_xf")}
    layer = target_statistics.TargetStatistics(TABLES, ["n_xf"], width)
    return tf.keras.Model(inputs, layer(inputs)), layer


def _filled(x, y, width=1, task=settings.CLASSIFICATION, batch=128):
    model, layer = _layer(width)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)
    assert target_statistics.fill(model, dataset, task) == ROWS
    return model, layer


def _expected(x, y, fold, table, training: bool, positive: np.ndarray):
    """Each row's smoothed, centred, scaled mean from numpy: other folds in training."""
    prior = positive.mean()
    spread = np.sqrt(prior * (1 - prior))
    out = []
    for i in range(ROWS):
        same = x[table] == x[table][i]
        if training:
            same &= fold != fold[i]
        mean = (positive[same].sum() + prior * target_statistics.SMOOTHING) / (
            same.sum() + target_statistics.SMOOTHING)
        out.append((mean - prior) / spread)
    return np.array(out)


def test_a_row_in_training_sees_its_value_over_the_other_folds_and_in_inference_over_all():
    x, y = _data()
    model, layer = _filled(x, y)
    fold = layer.fold(x).numpy()
    assert sorted(set(fold)) == list(range(target_statistics.FOLDS))
    positive = (y == 1).astype(float)
    for training in (True, False):
        got = model(x, training=training).numpy()
        for t, (table, _) in enumerate(TABLES):
            np.testing.assert_allclose(got[:, t], _expected(x, y, fold, table, training, positive),
                                       rtol=1e-5, atol=1e-5)


def test_a_rows_own_label_never_reaches_its_own_feature_in_training():
    x, y = _data()
    first, counted = _filled(x, y)
    before, prior = first(x, training=True).numpy(), counted.prior.numpy()
    flipped = y.copy()
    flipped[17] = 1 - flipped[17]
    model, layer = _filled(x, flipped)
    layer.prior.assign(prior)  # the prior (every fit row's mean) moves by 1/600: pinned
    after = model(x, training=True).numpy()
    assert np.array_equal(after[17], before[17])
    fold = layer.fold(x).numpy()
    elsewhere = (x["id_code"] == x["id_code"][17]) & (fold != fold[17])
    assert elsewhere.any() and not np.allclose(after[elsewhere, 1], before[elsewhere, 1])
    assert not np.allclose(model(x, training=False).numpy()[17], before[17])


def test_a_row_repeated_is_in_one_fold_whatever_its_batch():
    x, y = _data()
    _, layer = _filled(x, y)
    twice = {k: np.concatenate([v, v[::-1]]) for k, v in x.items()}
    fold = layer.fold(twice).numpy()
    assert np.array_equal(fold[:ROWS], fold[ROWS:][::-1])
    assert np.array_equal(layer.fold({k: v[:50] for k, v in x.items()}).numpy(), fold[:50])


def test_more_classes_count_each_class_and_a_regression_its_mean():
    x, y = _data(classes=3)
    model, layer = _filled(x, y, width=3)
    counts = layer.counts.numpy()
    assert counts.shape == (47, target_statistics.FOLDS, 4)
    for value in range(7):
        rows = x["city_xf"] == value
        assert np.allclose(counts[value].sum(axis=0), [*(np.bincount(y[rows], minlength=3)),
                                                       rows.sum()])
    assert model(x, training=False).shape == (ROWS, 2 * 3)
    label = np.random.default_rng(1).normal(size=ROWS).astype("float32")
    _, layer = _filled(x, label, task=settings.REGRESSION)
    assert np.isclose(layer.counts.numpy()[7:, :, 0].sum(), label.sum(), atol=1e-3)
    assert np.isclose(layer.prior.numpy()[0, 0], label.mean(), atol=1e-5)


@pytest.mark.parametrize("task,outputs,width", [
    (settings.CLASSIFICATION, 2, 1), (settings.CLASSIFICATION, 7, 7),
    (settings.REGRESSION, 1, 1), (settings.CLASSIFICATION, 40, 0)])
def test_the_built_in_model_has_them_unless_told_not_to(task, outputs, width):
    tables = {"city_xf": 7, "id_code": 40}
    built = model_lib.tabular(["n_xf"], tables, outputs, task, settings.TrainerConfig(
        hidden_units=[8], embedding_dim=4, ensemble_members=2))
    assert len(target_statistics.layers(built)) == (1 if width else 0)
    off = model_lib.tabular(["n_xf"], tables, outputs, task, settings.TrainerConfig(
        hidden_units=[8], embedding_dim=4, ensemble_members=2, target_statistics=False))
    assert not target_statistics.layers(off)


def test_the_tables_counted_are_the_same_however_they_are_laid_out():
    """A table split over the replicas has its statistics as a stacked one does (its ids come to
    the model's core beside its rows): trainer.shard_embeddings_over lays the tables out, it
    does not change the model; only a table whose counts would pass COUNTED_BYTES has none."""
    tables = {"city_xf": 7, "id_code": 40}
    cfg = settings.TrainerConfig(hidden_units=[8], embedding_dim=4, ensemble_members=2)
    whole = model_lib.tabular(["n_xf"], tables, 2, settings.CLASSIFICATION, cfg)
    split = model_lib.tabular(["n_xf"], tables, 2, settings.CLASSIFICATION, cfg,
                              shards={"id_code": 1})
    [counted] = target_statistics.layers(split)
    assert counted.tables == target_statistics.layers(whole)[0].tables == [
        ["city_xf", 7], ["id_code", 40]]
    assert target_statistics.ids_name("id_code") in model_lib.sharded_parts(split)[0].input
    huge = target_statistics.COUNTED_BYTES // (target_statistics.FOLDS * 2 * 4) + 1
    assert target_statistics.counted_tables({"user_xf": huge, "city_xf": 7}, settings.CLASSIFICATION,
                                            2, cfg) == [["city_xf", 7]]



def test_a_table_whose_values_are_seen_on_few_rows_is_its_statistics_alone():
    """trainer.embedding_min_rows: `fill` keeps a counted table's embedding rows where its seen
    values average at least min_rows fit rows (city_xf: 600 rows over 7 values), and leaves out
    those of one whose values average fewer (id_code: 15 each), in training and in inference;
    a table not counted keeps its rows; min_rows 0 keeps every table's."""
    x, y = _data()
    order, dim = ["city_xf", "id_code", "zone_xf"], 3
    rows = np.random.default_rng(2).normal(size=(ROWS, len(order) * dim)).astype("float32")
    for min_rows, kept in ((0.0, [1, 1]), (20.0, [1, 0]), (15.0, [1, 1]), (86.0, [0, 0])):
        inputs = {k: tf.keras.Input((), dtype=tf.int64 if k != "n_xf" else tf.float32, name=k)
                  for k in ("city_xf", "id_code", "n_xf")}
        inputs[target_statistics.ROWS] = tf.keras.Input((len(order) * dim,), name="rows")
        layer = target_statistics.TargetStatistics(TABLES, ["n_xf"], 1, order=order, dim=dim,
                                                   min_rows=min_rows)
        model = tf.keras.Model(inputs, layer(inputs))
        target_statistics.fill(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(128),
                               settings.CLASSIFICATION)
        assert layer.kept.numpy().tolist() == kept, min_rows
        expected = rows * np.repeat([*kept, 1], dim)
        for training in (True, False):
            out, statistics = model({**x, target_statistics.ROWS: rows}, training=training)
            np.testing.assert_array_equal(out.numpy(), expected)
            assert statistics.shape == (ROWS, len(TABLES))
