"""The embedding tables' own decay (trainer_module/table_decay.py): AdamW shrinks each table's
rows by (rate x table_weight_decay) at every step, looked up or not, and every other weight by
(rate x weight_decay); the run's optimizer is made so (trainer_module/build.py). That a table
split over the replicas, or over the parameter servers, decays as the whole table does on one
device is held by tests/test_sharded_embedding.py and tests/test_parameter_server.py, whose
optimizer is this one."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import build, model as model_lib, settings, table_decay, table_stack

NUMERIC = ["a_missing", "a_q", "a_xf"]
TABLES = {"k_code": 6, "user_xf": 50}


@pytest.mark.parametrize("name, table", [
    ("categorical_tables/embeddings:0", True),
    ("embed_user_xf/embeddings:0", True),
    ("embed_user_xf/embeddings/replica_1:0", True),  # a mirrored table's copy on replica 1
    ("embed_user_xf/embeddings/part_0:0", True),  # a table in parts on the parameter servers
    ("numeric_embedding/kernel:0", False),
    ("ensemble/dense_0/kernel:0", False),
    ("ensemble/scale:0", False),
    ("embedded/kernel:0", False),
])
def test_a_table_is_told_by_its_layer_name(name, table):
    assert table_decay.is_table(name) is table


def _model(cfg):
    return model_lib.tabular(NUMERIC, TABLES, 2, settings.CLASSIFICATION, cfg)


def test_the_tables_decay_at_their_own_rate_and_every_other_weight_at_weight_decay():
    """One step of a zero gradient (Adam's move is then zero): each weight is what the decay
    alone leaves, the tables' rows at trainer.table_weight_decay, the rest at weight_decay; the
    run's optimizer is this one."""
    cfg = settings.TrainerConfig(hidden_units=[8], embedding_dim=4, ensemble_members=2, seed=3,
                                 table_weight_decay=3.0)
    model = _model(cfg)
    rate = 0.01
    optimizer = build.optimizer(cfg, rate)
    assert isinstance(optimizer, table_decay.AdamW)
    assert (optimizer.table_decay, optimizer.weight_decay) == (3.0, 3e-4)
    before = {w.name: w.numpy() for w in model.trainable_variables}
    tables = [name for name in before if table_decay.is_table(name)]
    assert tables == [f"{table_stack.NAME}/embeddings:0"], before.keys()
    optimizer.apply_gradients((tf.zeros_like(w), w) for w in model.trainable_variables)
    for weight in model.trainable_variables:
        decay = 3.0 if weight.name in tables else 3e-4
        np.testing.assert_allclose(weight.numpy(), before[weight.name] * (1 - rate * decay),
                                   rtol=1e-6, err_msg=weight.name)


def test_at_the_default_the_run_trains_keras_adamws_model_to_the_bit():
    """trainer.table_weight_decay's default (-1) is weight_decay's: 12 steps of the built-in
    model (its tables' rows looked up unevenly) with the run's optimizer and with Keras's AdamW
    end on the same weights, bit for bit; at 3.0 the tables end elsewhere."""
    cfg = settings.TrainerConfig(hidden_units=[8], embedding_dim=4, ensemble_members=2, seed=3)
    assert cfg.table_weight_decay == -1 and table_decay.configured(cfg) == cfg.weight_decay == 3e-4
    rng = np.random.default_rng(0)
    x = {"a_missing": np.zeros(96, "float32"), "a_q": rng.uniform(0, 48, 96).astype("float32"),
         "a_xf": rng.normal(size=96).astype("float32"),
         "k_code": rng.integers(0, 6, 96), "user_xf": np.minimum(rng.zipf(1.5, 96), 49)}
    y = (x["a_xf"] > 0).astype("int64")

    def trained(optimizer):
        model = _model(cfg)
        loss = model_lib.builtin_loss(settings.CLASSIFICATION)
        model.compile(optimizer=optimizer, loss=lambda t, out: tf.reduce_mean(loss(t, out)))
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return {w.name: w.numpy() for w in model.trainable_variables}

    run = trained(build.optimizer(cfg, 0.01))
    keras = trained(tf.keras.optimizers.AdamW(0.01, weight_decay=cfg.weight_decay))
    for name, weight in run.items():
        np.testing.assert_array_equal(weight, keras[name], err_msg=name)
    harder = trained(build.optimizer(settings.TrainerConfig(
        hidden_units=[8], embedding_dim=4, ensemble_members=2, seed=3,
        table_weight_decay=3.0), 0.01))
    table = f"{table_stack.NAME}/embeddings:0"
    assert np.abs(harder[table] - run[table]).max() > 1e-3


def test_the_tables_follow_weight_decay_unless_set_and_a_split_table_reads_their_rate():
    """A config that sets weight_decay alone decays the tables at it too, as AdamW did before
    the tables had a decay of their own; weight_decay 0 alone is Adam."""
    for decay in (0.0, 0.01):
        cfg = settings.TrainerConfig(weight_decay=decay)
        assert table_decay.configured(cfg) == decay
        assert table_decay.rate(build.optimizer(cfg, 0.01)) == decay
    adam = build.optimizer(settings.TrainerConfig(weight_decay=0.0), 0.01)
    assert type(adam) is tf.keras.optimizers.Adam and table_decay.rate(adam) == 0.0
    tables_only = build.optimizer(settings.TrainerConfig(weight_decay=0.0,
                                                         table_weight_decay=3.0), 0.01)
    assert (tables_only.weight_decay, table_decay.rate(tables_only)) == (0.0, 3.0)
    cfg = settings.TrainerConfig(table_weight_decay=3.0)
    assert table_decay.rate(build.optimizer(cfg, 0.01)) == 3.0
    assert table_decay.rate(tf.keras.optimizers.AdamW(0.01, weight_decay=0.004)) == 0.004
    settings.TrainerConfig(table_weight_decay=0.0).validate()
    for wrong in (-0.5, -2.0):
        with pytest.raises(settings.TrainerConfigError, match="table_weight_decay"):
            settings.TrainerConfig(table_weight_decay=wrong).validate()
