"""tf-keras is not rewritten by AutoGraph when a traced step calls a model; user code still is.

Without the rule (trainer_module/autograph_rules.py) TensorFlow 2.16 converted Keras' own
Layer.__call__ and its helpers once per layer call in every trace: most of the Trainer's time on a
wide table."""

import collections

import pytest
import tensorflow as tf

from trainer_module import autograph_rules, loop, tf_internals
from test_synchronous_training import builtin_records  # noqa: F401  (a module's fixture)


@pytest.fixture
def converted():
    """Counts the functions AutoGraph converts, by (module, qualified name)."""
    with tf_internals.conversions_counted(collections.Counter()) as seen:
        yield seen


class Clipped(tf.keras.layers.Layer):
    """A user's layer with Python control flow on a tensor: it needs AutoGraph to trace."""

    def call(self, x):
        if tf.reduce_max(x) > 1.0:
            return tf.minimum(x, 1.0)
        return x


def _wide_model(columns: int) -> tf.keras.Model:
    inputs = {f"c{i}": tf.keras.Input(shape=(), name=f"c{i}") for i in range(columns)}
    x = tf.stack(list(inputs.values()), axis=1)
    x = tf.keras.layers.Dense(4, activation="relu")(Clipped()(x))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(2)(x))


def test_keras_is_not_converted_but_user_code_is(converted):
    assert autograph_rules.installed()
    model = _wide_model(40)

    @tf.function
    def step(features):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(features, training=True))
        return tape.gradient(loss, model.trainable_variables)

    features = {f"c{i}": tf.fill([3], 2.0) for i in range(40)}
    grads = step(features)
    assert all(g is not None for g in grads)
    keras = {key: n for key, n in converted.items() if key[0].startswith("tf_keras")}
    assert not keras, keras  # was: Layer.__call__ and a dozen helpers per layer call
    assert converted[(__name__, "Clipped.call")] >= 1  # the user's `if` on a tensor still traces
    autograph_rules.install()  # idempotent
    assert tf_internals.unconverted_rules("tf_keras") == 1


def test_tf_transform_is_not_converted(converted):
    """tf.Transform's code traces without AutoGraph (it traces its own graphs with
    autograph=False); the Trainer's dataset map and serving signature call its transform layer."""
    from tensorflow_transform import tf2_utils

    assert autograph_rules.installed("tensorflow_transform")

    @tf.function
    def supplied(x):
        return tf2_utils.supply_missing_inputs({"a": x, "b": tf.sparse.from_dense(x)}, 3)

    out = supplied(tf.constant([[1.0], [2.0]]))
    assert set(out) == {"a", "b"}
    assert not [key for key in converted if key[0].startswith("tensorflow_transform")], converted
    autograph_rules.install()  # idempotent
    assert tf_internals.unconverted_rules("tensorflow_transform") == 1


def test_lockstep_traces_its_own_code_as_written_and_a_users_loss_still_converts(converted,
                                                                                builtin_records):  # noqa: F811
    """The loop, the built-in model's layers, the gradients' sum over replicas and the input
    pipeline's functions are traced as written (autograph_rules.plain, and the loop's tf.function
    with autograph=False): no rewrite of lockstep's code in a train step's trace. A user's loss
    with a tensor `if`, which the built-in model's per-member wrapper calls, is still converted."""
    from test_synchronous_training import BUILTIN_SPEC, _builtin, _strategy
    from trainer_module import input_pipeline, model as model_lib, settings

    strategy = _strategy(2)
    with strategy.scope():
        model = _builtin(settings.CLASSIFICATION)
        optimizer = tf.keras.optimizers.SGD(0.01)

    def users_loss(labels, outputs):  # a tensor `if`: it needs AutoGraph to trace
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int64),
                                                              tf.cast(outputs, tf.float32))
        if tf.reduce_max(loss) > 1e6:
            loss = tf.minimum(loss, 1e6)
        return loss

    make = input_pipeline.make_dataset_fn(builtin_records, BUILTIN_SPEC, "y",
                                          settings.REGRESSION, 8, training=True, seed=3)
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: make(ctx).map(lambda x, y: (x, tf.cast(y, tf.int64))))
    trainer = loop.SynchronousLoop(strategy, model, optimizer, model_lib.per_member(users_loss),
                                   16, dataset)
    assert trainer.train(2)["steps"] == 2
    ours = [name for module, name in converted if module.startswith("trainer_module")]
    assert not ours, ours  # was: the loop's seven functions and the per-member wrapper
    assert [name for module, name in converted if name.endswith("users_loss")], converted


def users_loss(labels, outputs):
    """A user's per-example loss with a Python `if` on a tensor."""
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, outputs)
    if tf.reduce_max(loss) > 1e6:
        loss = tf.minimum(loss, 1e6)
    return loss


class UsersLoss(tf.keras.losses.Loss):
    """The same as a Keras Loss (reduction NONE), the other form trainer.loss takes."""

    def call(self, labels, outputs):
        return users_loss(labels, outputs)


@pytest.mark.parametrize("form", ["function", "keras Loss"])
def test_a_users_model_with_a_tensor_if_trains_in_the_loop_traced_as_written(converted, form):
    """A model of the user's own (trainer.model) whose layer has a Python `if` on a tensor, and a
    loss of the user's own with one, train in the loop (its tf.function traces lockstep's code
    as written): Keras converts the layer's `call`, the loop converts the loss."""
    model = _wide_model(3)
    optimizer = tf.keras.optimizers.SGD(0.01)
    loss = users_loss if form == "function" else UsersLoss(reduction="none")

    features = {f"c{i}": tf.constant([0.5, 2.0, -1.0, 3.0]) for i in range(3)}
    dataset = tf.data.Dataset.from_tensors((features, tf.constant([0, 1, 1, 0],
                                                                  tf.int64))).repeat()
    trainer = loop.SynchronousLoop(tf.distribute.get_strategy(), model, optimizer, loss, 4,
                                   dataset)
    before = [v.numpy().copy() for v in model.trainable_variables]
    assert trainer.train(3)["steps"] == 3
    assert any((b != v.numpy()).any() for b, v in zip(before, model.trainable_variables))
    assert converted[(__name__, "Clipped.call")] >= 1
    assert [name for module, name in converted if name.endswith("users_loss")], converted
    assert not [name for module, name in converted if module.startswith("trainer_module")]
