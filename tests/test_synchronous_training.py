"""The one-update answer, tested: N replicas at per-replica batch B/N make exactly the update one
device makes on the global batch B; dividing by the per-replica batch instead makes it N x too big."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import config, input_pipeline, loop, model as model_lib

GLOBAL_BATCH = 64
SPEC = {
    "a_xf": tf.io.FixedLenFeature([], tf.float32),
    "b_xf": tf.io.FixedLenFeature([], tf.float32),
    "k_xf": tf.io.FixedLenFeature([], tf.int64),
    "y_xf": tf.io.FixedLenFeature([], tf.int64),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Real TFRecords of transformed-style features, 3 classes."""
    path = str(tmp_path_factory.mktemp("records") / "train.tfrecord.gz")
    rng = np.random.default_rng(7)
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for _ in range(1024):
            y = int(rng.integers(0, 3))
            example = tf.train.Example()
            f = example.features.feature
            f["a_xf"].float_list.value.append(rng.normal(y, 1.0))
            f["b_xf"].float_list.value.append(rng.normal(-y, 1.0))
            f["k_xf"].int64_list.value.append(int(rng.integers(0, 5)))
            f["y_xf"].int64_list.value.append(y)
            writer.write(example.SerializeToString())
    return path


def _strategy(replicas):
    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    assert len(devices) == replicas
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def train(records, replicas, steps, *, l2=0.01, optimizer="sgd_momentum", average_loss=None,
          jit_compile=False, steps_per_execution=None, nan_at=None):
    strategy = _strategy(replicas)
    with strategy.scope():
        model = model_lib.build_model(["a_xf", "b_xf"], {"k_xf": 5}, 3, (8,), l2=l2, seed=1)
        opt = (tf.keras.optimizers.SGD(0.1, momentum=0.9) if optimizer == "sgd_momentum"
               else tf.keras.optimizers.SGD(0.1))
    dataset_fn = input_pipeline.make_dataset_fn(
        records, SPEC, "y", config.CLASSIFICATION, GLOBAL_BATCH // replicas, training=True, seed=3)
    if nan_at is not None:  # poison one example of the given global step
        base = dataset_fn

        def dataset_fn(ctx):
            def poison(i, xy):
                x, y = xy
                bad = tf.equal(i, nan_at * replicas)
                x = dict(x, a_xf=tf.where(bad, x["a_xf"] * np.nan, x["a_xf"]))
                return x, y
            return base(ctx).enumerate().map(poison)
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    trainer = loop.Trainer(strategy, model, opt, model_lib.per_example_loss_fn(config.CLASSIFICATION),
                           GLOBAL_BATCH, dataset, jit_compile=jit_compile, average_loss=
                           average_loss(GLOBAL_BATCH // replicas) if average_loss else None)
    per_call = steps_per_execution or steps
    done = 0
    while done < steps:
        trainer.train(min(per_call, steps - done))
        done += min(per_call, steps - done)
    return model, opt


def _weights(model):
    return [w.numpy() for w in model.weights]


@pytest.fixture(scope="module")
def single_device(records):
    model, opt = train(records, 1, 5)
    return _weights(model)


@pytest.mark.parametrize("replicas", [2, 4, 8])
def test_n_replicas_equal_one_device_on_the_global_batch(records, single_device, replicas):
    model, opt = train(records, replicas, 5)
    assert int(opt.iterations.numpy()) == 5  # one update per global step, not per replica
    assert any(w.size and np.abs(w).sum() for w in single_device)
    for got, want in zip(_weights(model), single_device):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_model_is_l2_regularized(records):
    model, _ = train(records, 2, 1)
    assert model.losses, "the equivalence must hold with regularization losses"


@pytest.mark.parametrize("replicas", [2, 4, 8])
def test_counter_example_per_replica_mean_makes_the_update_n_times_too_large(records, replicas):
    per_replica_mean = lambda per_replica_batch: (  # noqa: E731
        lambda per_example: tf.reduce_sum(per_example) / per_replica_batch)
    init = _weights(train(records, 1, 0, l2=0.0, optimizer="sgd")[0])
    want = _weights(train(records, 1, 1, l2=0.0, optimizer="sgd")[0])
    right = _weights(train(records, replicas, 1, l2=0.0, optimizer="sgd")[0])
    wrong = _weights(train(records, replicas, 1, l2=0.0, optimizer="sgd",
                           average_loss=per_replica_mean)[0])
    for w0, w1, ok, bad in zip(init, want, right, wrong):
        np.testing.assert_allclose(ok - w0, w1 - w0, atol=1e-6)
        np.testing.assert_allclose(bad - w0, replicas * (w1 - w0), atol=1e-5)
    # ...so the equivalence check above would have caught it:
    assert not all(np.allclose(b, w, atol=1e-6) for b, w in zip(wrong, want))


def test_steps_per_execution_does_not_change_the_result(records, single_device):
    model, opt = train(records, 2, 5, steps_per_execution=2)
    for got, want in zip(_weights(model), single_device):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_xla_compiled_step_matches(records, single_device):
    model, opt = train(records, 2, 5, jit_compile=True)
    for got, want in zip(_weights(model), single_device):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_non_finite_loss_stops_and_names_the_step(records):
    with pytest.raises(loop.NonFiniteLoss, match=r"at global step 4;"):
        train(records, 2, 6, nan_at=3)


@pytest.mark.parametrize("batch, chunk_steps", [(64, 1), (8, 1), (8, 32)])  # (8, 32): 4 chunks
def test_cached_input_is_every_record_once_per_epoch_in_a_new_order(records, batch, chunk_steps):
    dataset_fn = input_pipeline.make_dataset_fn(records, SPEC, "y", config.CLASSIFICATION, batch,
                                                training=True, seed=3, cache=True,
                                                chunk_steps=chunk_steps)
    steps = 1024 // batch
    epochs = [[], []]
    for index, (x, _) in enumerate(dataset_fn(None).take(2 * steps)):
        assert x["a_xf"].shape == (batch,)
        epochs[index // steps].append(x["a_xf"].numpy())
    everything = sorted(np.concatenate(list(input_pipeline.make_dataset_fn(
        records, SPEC, "y", config.CLASSIFICATION, 1024, training=False)(None).map(
            lambda x, _: x["a_xf"]))))
    for epoch in epochs:
        np.testing.assert_array_equal(sorted(np.concatenate(epoch)), everything)
    # The steps are reshuffled each epoch (the records in a step are fixed at the first parse).
    first, second = ([tuple(step) for step in epoch] for epoch in epochs)
    assert first != second and sorted(first) == sorted(second)
