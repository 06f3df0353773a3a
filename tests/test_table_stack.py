"""The built-in model's whole tables stacked in one variable (trainer_module/table_stack.py) are
the model of one Keras Embedding per feature: the same initial weights, the same weights after 24
AdamW steps with ids repeated within a batch (every table stacked, or some of them tables of
their own in between), each table its own weight in the weights file, so a warm start copies the
tables that still fit and a table whose vocabulary grew starts afresh alone. Likewise the numeric
columns packed in one input (features.NUMERIC_COLUMNS) are the model of three inputs a column."""

import numpy as np
import tensorflow as tf

from trainer_module import export, features, model as model_lib, settings, table_decay
from trainer_module import table_stack

NUMERIC = [f"{c}_{s}" for c in ("a", "b") for s in ("missing", "q", "xf")] + ["c_xf"]
TABLES = {"city_xf": 40, "k_code": 6, "m_xf": 3, "user_xf": 97}
CFG = settings.TrainerConfig(hidden_units=[16, 16], embedding_dim=4, ensemble_members=3, seed=7)
STEPS, BATCH = 24, 32


def _model(own=(), tables=None):
    """The built-in model; the features in `own` each a Keras Embedding of its own (the
    separate tables a model gets outside a stack; on one device, server_blocks builds plain
    Embeddings)."""
    return model_lib.tabular(NUMERIC, tables or TABLES, 3, settings.CLASSIFICATION, CFG,
                             server_blocks={key: 2 for key in own})


def _batches():
    rng = np.random.default_rng(0)
    n = STEPS * BATCH
    x = {key: rng.normal(size=n).astype("float32") for key in NUMERIC}
    for key in ("a_q", "b_q"):
        x[key] = rng.uniform(0, 48, n).astype("float32")
    # A power law: the same few ids many times in each batch.
    x.update({key: np.minimum(rng.zipf(1.4, n) - 1, rows - 1).astype("int64")
              for key, rows in TABLES.items()})
    y = ((x["a_xf"] > 0) + (x["user_xf"] % 2)).astype("int64")
    return x, y


def _logical(model):
    return {w.name: np.array(w.numpy()) for w in model_lib.logical_weights(model)}


def _train(model, batches=None):
    model.compile(optimizer=table_decay.AdamW(  # the tables at a decay of their own, stacked or not
                      3.0, learning_rate=0.01, weight_decay=CFG.weight_decay),
                  loss=lambda y, out: tf.reduce_mean(model_lib.builtin_loss(
                      settings.CLASSIFICATION)(y, out)))
    x, y = batches or _batches()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    return _logical(model)


def test_stacked_tables_train_as_one_embedding_per_feature():
    stacked = _model()
    assert [layer.name for layer in table_stack.stacks(stacked)] == [table_stack.NAME]
    assert not [layer for layer in stacked.layers if isinstance(layer, tf.keras.layers.Embedding)]
    initial = _logical(stacked)
    trained = {}
    for own in ((), tuple(TABLES), ("k_code", "user_xf")):
        model = _model(own)
        embeddings = sorted(layer.name for layer in model.layers
                            if isinstance(layer, tf.keras.layers.Embedding))
        assert embeddings == sorted(f"embed_{key}" for key in own)
        start = _logical(model)
        assert sorted(start) == sorted(initial)
        for name in initial:  # drawn alike, stacked or not
            np.testing.assert_array_equal(start[name], initial[name], err_msg=name)
        trained[own] = _train(model)
    separate = trained[tuple(TABLES)]
    moved = max(np.abs(separate[n] - initial[n]).max() for n in initial)
    assert moved > 0.05
    for own in ((), ("k_code", "user_xf")):
        worst = max(np.abs(trained[own][n] - separate[n]).max() for n in separate)
        assert worst <= 1e-6, (own, worst)


def test_packed_numeric_columns_train_as_three_inputs_a_column():
    """a and b packed, [batch, 2, 3] of (position, z-score, flag), c_xf a number alone: the
    same weights as the model of a feature an input, before and after 24 AdamW steps."""
    per_feature = _model()
    packed = model_lib.tabular(["c_xf"], TABLES, 3, settings.CLASSIFICATION, CFG, packed=2)
    assert features.NUMERIC_COLUMNS in packed.input and "a_q" not in packed.input
    assert _logical(packed).keys() == _logical(per_feature).keys()
    assert all(np.array_equal(_logical(packed)[k], v) for k, v in _logical(per_feature).items())
    expected = _train(per_feature)
    x, y = _batches()
    x[features.NUMERIC_COLUMNS] = np.stack([np.stack(
        [x.pop(f"{c}_{part}") for part in ("q", "xf", "missing")], axis=1) for c in ("a", "b")],
        axis=1)
    trained = _train(packed, (x, y))
    assert all(np.array_equal(trained[k], v) for k, v in expected.items())


def test_the_stack_rebuilds_from_its_config_with_the_same_answers():
    model = _model(("k_code",))
    x, _ = _batches()
    x = {k: v[:BATCH] for k, v in x.items()}
    again = tf.keras.Model.from_config(model.get_config())
    again.set_weights(model.get_weights())
    np.testing.assert_array_equal(model(x, training=False).numpy(),
                                  again(x, training=False).numpy())


def test_a_warm_start_copies_each_table_that_still_fits(tmp_path):
    base = _model()
    _train(base)
    export.write_weights(base, str(tmp_path / "served"))
    reader = tf.train.load_checkpoint(str(tmp_path / "served" / export.WEIGHTS))
    keys = {key.split("/")[0] for key in reader.get_variable_to_shape_map()}
    assert {f"embed_{key}__embeddings_0" for key in TABLES} <= keys
    assert not [key for key in keys if key.startswith(table_stack.NAME)]
    grown = {**TABLES, "city_xf": 45}  # a vocabulary that grew
    for target in (_model(tables=grown), _model(("user_xf",), tables=grown)):
        before = _logical(target)
        matched = export.warm_start(target, str(tmp_path / "served"))
        after, want = _logical(target), _logical(base)
        # The grown table, and the target statistics' counts (a row a value of every table;
        # counted again from the data before training: trainer_module/target_statistics.py).
        grew = ("embed_city_xf/embeddings:0", "target_statistics/counts:0")
        assert matched == len(after) - len(grew)
        for name in grew:
            np.testing.assert_array_equal(after[name], before[name])
        for name in after:
            if name not in grew:
                np.testing.assert_array_equal(after[name], want[name], err_msg=name)


def test_a_model_of_one_embedding_per_feature_warm_starts_the_stacked_one(tmp_path):
    """The weights file of a model exported before the stack (one Embedding per feature: the
    same names) warm-starts every weight of the stacked model, each table into its rows."""
    before = _model(tuple(TABLES))  # on one device: a plain Embedding per feature
    _train(before)
    export.write_weights(before, str(tmp_path / "served"))
    stacked = _model()
    assert export.warm_start(stacked, str(tmp_path / "served")) == len(_logical(stacked))
    want = _logical(before)
    for name, value in _logical(stacked).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)
