"""Model parallelism (trainer_module/sharded_embedding.py): the built-in model with an id
column's table split by rows over N replicas trains to the weights of the same model with the
whole table on one device, after 24 AdamW steps on the global batch, with ids repeated within a
batch; accumulation and XLA keep it; a checkpoint of N blocks restores on M; the served model
holds the whole table and answers as the trained one."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import replica_strategy as _strategy
from trainer_module import build, early_stopping, equivalence, export, hooks, input_pipeline, loop
from trainer_module import model as model_lib, scaling, settings, table_decay, table_plan, warmup

ROWS = 997  # not a multiple of 2, 4 or 8: the last block is partly padding
GLOBAL_BATCH = 64
STEPS = 24
EIGHT = pytest.param(8, marks=pytest.mark.slow)
SPEC = {**{f"{c}_{s}": tf.io.FixedLenFeature([], tf.float32)
           for c in ("a", "b") for s in ("xf", "q", "missing")},
        "user_xf": tf.io.FixedLenFeature([], tf.int64),
        "k_xf": tf.io.FixedLenFeature([], tf.int64),
        "y_xf": tf.io.FixedLenFeature([], tf.float32)}
NUMERIC = sorted(k for k, v in SPEC.items() if v.dtype == tf.float32 and k != "y_xf")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Real TFRecords: a user id (power law: the same users many times in a batch, most of the
    997 seldom) whose own effect decides much of the class, two numeric columns, a small code."""
    path = str(tmp_path_factory.mktemp("users") / "train.tfrecord.gz")
    rng = np.random.default_rng(3)
    effect = rng.normal(0, 1, ROWS)
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for _ in range(2048):
            user = (int(min(rng.zipf(1.3) - 1, ROWS - 1)) if rng.random() < 0.7
                    else int(rng.integers(0, ROWS)))
            y = int(np.clip(np.round(effect[user] + rng.normal(0, 0.5) + 1), 0, 2))
            example = tf.train.Example()
            f = example.features.feature
            for column, centre in (("a", y), ("b", -y)):
                z = rng.normal(centre, 1.0)
                f[f"{column}_xf"].float_list.value.append(z)
                f[f"{column}_q"].float_list.value.append(float(np.clip((z + 3) * 8, 0, 48)))
                f[f"{column}_missing"].float_list.value.append(0.0)
            f["user_xf"].int64_list.value.append(user)
            f["k_xf"].int64_list.value.append(int(rng.integers(0, 5)))
            f["y_xf"].float_list.value.append(float(y))
            writer.write(example.SerializeToString())
    return path


def _model(shards, blocks=None):
    return model_lib.tabular(NUMERIC, {"user_xf": ROWS, "k_xf": 6}, 3, settings.CLASSIFICATION,
                             settings.TrainerConfig(hidden_units=[16, 16], embedding_dim=4,
                                                    ensemble_members=4, seed=5),
                             # k_xf: 6 rows, on 8 replicas a block on 6 of them
                             # 1: whole, in the stack (a one-block layer is one device's)
                             shards=blocks or (None if shards == 1 else {
                                 "user_xf": shards, "k_xf": min(shards, 6)}))


# The run's learning rate for this global batch: trainer.base_learning_rate scaled from
# trainer.base_batch by trainer.lr_scaling (0.004 x sqrt(64 / 256) = 0.002).
_RUN = settings.TrainerConfig()
LEARNING_RATE = _RUN.base_learning_rate * scaling.learning_rate_factor(
    GLOBAL_BATCH, _RUN.base_batch, _RUN.lr_scaling)


def _adamw():
    """The run's optimizer (trainer_module/build.py): AdamW on a warmup-and-decay schedule, the
    tables at a decay of their own (trainer_module/table_decay.py; 3.0, Caravan's, apart from
    weight_decay so that a split table's own update at the wrong one shows)."""
    return table_decay.AdamW(
        3.0, learning_rate=warmup.WarmupSchedule(LEARNING_RATE, 4, STEPS, 6),
        weight_decay=_RUN.weight_decay)


LOSS = model_lib.builtin_loss(settings.CLASSIFICATION)


def _dataset_fn(records, per_replica):
    base = input_pipeline.make_dataset_fn(records, SPEC, "y", settings.REGRESSION, per_replica,
                                          training=True, seed=3)
    return lambda ctx: base(ctx).map(lambda x, y: (x, tf.cast(y, tf.int64)))


def _train(records, replicas, initial, steps=STEPS, accumulation=1, jit_compile=False,
           model=None, optimizer=None, shards=None, strategy=None):
    """lockstep's loop on `replicas` replicas, the table split over them (one device: whole),
    from the logical weights `initial` (those of model_lib.unsharded)."""
    strategy = strategy or _strategy(replicas)
    if model is None:
        with strategy.scope():
            model = _model(replicas if shards is None else shards)
            optimizer = _adamw()
        _set_logical(model, initial)
    trainer = loop.SynchronousLoop(
        strategy, model, optimizer, LOSS, GLOBAL_BATCH,
        strategy.distribute_datasets_from_function(
            _dataset_fn(records, GLOBAL_BATCH // replicas)),
        accumulation_steps=accumulation, jit_compile=jit_compile)
    start = int(optimizer.iterations.numpy())
    trainer.train(steps // 2)
    trainer.train(steps - steps // 2)
    assert int(optimizer.iterations.numpy()) == start + steps  # one update a global step
    return model, optimizer


def _set_logical(model, weights):
    model_lib.set_logical_weights(model, weights)


def _logical(model):
    return [w.numpy().copy() for w in model_lib.logical_weights(model)]


@pytest.fixture(scope="module")
def initial():
    with _strategy(2).scope():
        model = _model(2)
    return _logical(model)


@pytest.fixture(scope="module")
def one_device(records, initial):
    """The same model, its table whole, on one device: lockstep's loop, and Keras `fit`."""
    model, _ = _train(records, 1, initial)
    reference = _model(1)
    _set_logical(reference, initial)
    reference.compile(optimizer=_adamw(), loss=equivalence._MeanOverBatch(LOSS), jit_compile=False)
    reference.fit(_dataset_fn(records, GLOBAL_BATCH)(None), steps_per_epoch=STEPS, epochs=1,
                  verbose=0)
    return _logical(model), _logical(reference)


def _gap(got, want) -> float:
    return max(float(np.abs(g - w).max()) for g, w in zip(got, want))


@pytest.mark.parametrize("replicas", [2, 4, EIGHT])
def test_a_sharded_table_on_n_replicas_trains_as_the_whole_table_on_one_device(
        records, initial, one_device, replicas):
    """Each replica holds 1/N of the rows; after 24 AdamW steps at the run's learning rate
    every weight, the table's rows too, is bit for bit that of the same N replicas each holding
    the whole table, and within 1e-6 of one device with the whole table, in lockstep's loop or
    Keras `fit` (measured 6e-8 to 1.5e-7, the weights having moved 0.04). That gap is data
    parallelism's, there without any sharding: float32 sums over each replica's 64 / N examples
    round otherwise than over 64, and Adam, which scales each weight's step by its own
    gradient's size, carries it on (5x the learning rate, 0.01, makes it 1.1e-6 to 1.8e-6,
    sharded or not)."""
    lockstep_one, keras_one = one_device
    mirrored, _ = _train(records, replicas, initial, shards=1)
    model, _ = _train(records, replicas, initial)
    table = model_lib.sharded_parts(model)[1]["user_xf"]
    sizes = [b.shape[0] for b in table.blocks.table]
    assert table.shards == replicas and sizes == table_plan.block_sizes(ROWS, replicas)
    assert sum(sizes) == ROWS and max(sizes) - min(sizes) == 1
    assert len({b.device for b in table.blocks.table}) == replicas  # a block on each device
    got = _logical(model)
    assert _gap(got, initial) > 0.03  # the weights moved
    assert _gap(got, _logical(mirrored)) == 0
    assert _gap(got, lockstep_one) <= 1e-6
    assert _gap(got, keras_one) <= 1e-6
    # Repeated ids: the most frequent user is in most batches, several times.
    table = [w.name for w in model_lib.logical_weights(model)].index("embed_user_xf/embeddings:0")
    assert np.abs(got[table][0] - initial[table][0]).max() > 1e-2


def test_accumulation_and_xla_keep_a_sharded_table_exact(records, initial, one_device):
    """2 replicas x 2 micro-batches, the gradient step XLA-compiled: the rows are exchanged
    once a global step, outside the micro-batches' loop and XLA."""
    model, _ = _train(records, 2, initial, accumulation=2, jit_compile=True)
    mirrored, _ = _train(records, 2, initial, accumulation=2, jit_compile=True, shards=1)
    assert _gap(_logical(model), _logical(mirrored)) == 0
    assert _gap(_logical(model), one_device[0]) <= 1e-6


def test_a_checkpoint_of_n_blocks_restores_on_m(records, initial, tmp_path):
    """Written on 4 replicas (4 blocks), read on 2: the logical table and Adam's slots are the
    same, and the two go on to train alike."""
    four = _strategy(4)
    with four.scope():
        model, optimizer = _model(4), _adamw()
    _set_logical(model, initial)
    _train(records, 4, initial, steps=6, model=model, optimizer=optimizer, strategy=four)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))

    two = _strategy(2)
    with two.scope():
        again, again_optimizer = _model(2), _adamw()
        again_optimizer.build(again.trainable_variables)
    tf.train.Checkpoint(model=again, optimizer=again_optimizer).read(path).assert_consumed()
    four_table = model_lib.sharded_parts(model)[1]["user_xf"]
    two_table = model_lib.sharded_parts(again)[1]["user_xf"]
    assert (two_table.shards, four_table.shards) == (2, 4)
    for slot in ("table", "m", "v"):
        whole = lambda t, slot=slot: np.concatenate(  # noqa: E731
            [b.numpy() for b in getattr(t.blocks, slot)])
        np.testing.assert_array_equal(whole(two_table), whole(four_table))
    assert int(again_optimizer.iterations.numpy()) == 6
    assert _gap(_logical(again), _logical(model)) == 0
    _train(records, 4, None, steps=4, model=model, optimizer=optimizer, strategy=four)
    _train(records, 2, None, steps=4, model=again, optimizer=again_optimizer, strategy=two)
    assert _gap(_logical(again), _logical(model)) <= 1e-6


def test_the_served_model_holds_the_whole_table_and_answers_as_trained(records, initial,
                                                                       tmp_path):
    """model_lib.unsharded: one Keras Embedding of [rows, dim], the blocks' rows; its answers
    are the trained model's (looked up across the blocks outside a step); warm start puts
    the served table back into the blocks."""
    with _strategy(4).scope():
        model = _model(4)
    _set_logical(model, initial)
    served = model_lib.unsharded(model)
    [embedding] = [layer for layer in served.layers
                   if isinstance(layer, tf.keras.layers.Embedding) and layer.name ==
                   "embed_user_xf"]
    assert embedding.embeddings.shape == (ROWS, 4)
    x, _ = next(iter(_dataset_fn(records, 256)(None)))
    np.testing.assert_array_equal(model(x, training=False), served(x, training=False))

    export.write_weights(served, str(tmp_path / "model"))
    with _strategy(2).scope():
        fresh = _model(2)
    assert export.warm_start(fresh, str(tmp_path / "model"), model_lib.sharded_parts(fresh)[1])
    table = model_lib.sharded_parts(fresh)[1]["user_xf"]
    np.testing.assert_array_equal(table.whole(), embedding.embeddings.numpy())


def test_early_stopping_keeps_and_restores_the_tables_best_rows(initial):
    """The best weights hold each block's rows on its own device."""
    with _strategy(4).scope():
        model = _model(4)
        best = early_stopping.BestWeights(model)
    _set_logical(model, initial)
    best.keep(model, 3, 0.5)
    table = model_lib.sharded_parts(model)[1]["user_xf"]
    assert [b.device for b in best.tables[1].table] == list(table.blocks.devices.values())
    table.assign_whole(np.zeros([ROWS, 4]))
    best.restore_into(model)
    assert _gap(_logical(model), initial) == 0


def test_the_run_splits_the_builtin_models_large_tables():
    """build.table_shards: under MirroredStrategy, a table past trainer.shard_embeddings_over;
    never on one device, where that table is one block: a layer of its own all the same
    (tables_in_blocks), so a checkpoint of it restores on any replica count."""
    spec = {"user_xf": tf.io.FixedLenFeature([], tf.int64),
            "k_xf": tf.io.FixedLenFeature([], tf.int64)}
    sizes = {"vocab_user": ROWS - 1, "vocab_k": 5}
    cfg = settings.TrainerConfig(embedding_dim=4, shard_embeddings_over=ROWS * 4 * 12 - 1)
    inputs = hooks.ModelInputs(spec, sizes, settings.CLASSIFICATION, 3, cfg)
    assert build.table_shards(inputs, _strategy(4)) == {**{k: 1 for k in inputs.categorical},
                                                       "user_xf": 4}
    assert set(build.table_shards(inputs, _strategy(1)).values()) == {1}
    for replicas in (1, 4):
        assert build.tables_in_blocks(inputs, _strategy(replicas)) == {"user_xf": replicas}
    with _strategy(4).scope(), pytest.raises(ValueError, match=r"one device's, not 4 .*user_xf"):
        _model(4, {"user_xf": 1})  # on 4 replicas each would update that block alone


def test_a_split_table_starts_as_the_whole_table_would():
    """The same seed, the same first weights, split or whole: a run on N replicas and one on one
    device start alike."""
    with _strategy(4).scope():
        split = _model(4)
    whole = _model(1)
    for got, want in zip(_logical(split), _logical(whole)):
        np.testing.assert_array_equal(got, want)
