"""trainer_module/export.py's warm start: each weight of the base model with the same name and
shape is copied, the others start afresh; read by name from the weights the export leaves beside
the signatures, or, from a model exported before them, through Keras."""

import os

import numpy as np
import tensorflow as tf

from trainer_module import export, model as model_lib, table_stack
from trainer_module.settings import TrainerConfig


def _mlp(hidden, outputs=3, seed=1):
    return model_lib.tabular(["a_missing", "a_q", "a_xf", "b_xf"], {"k_xf": 5}, outputs,
                             "classification", TrainerConfig(
                                 hidden_units=list(hidden), embedding_dim=4, ensemble_members=2,
                                 seed=seed))


def _fitting(base, target) -> int:
    """How many of target's weights have a weight of the same name and shape in base."""
    shapes = {v.name: tuple(v.shape) for v in base.weights}
    return sum(shapes.get(v.name) == tuple(v.shape) for v in target.weights)


def _names(model):
    return {v.name: v.numpy() for v in model.weights}


def test_a_warm_start_copies_the_weights_that_still_fit(tmp_path):
    base = _mlp((8, 4), seed=1)
    export.write_weights(base, str(tmp_path / "new"))
    target = _mlp((8, 6), seed=2)  # the second layer and the heads changed shape
    before = _names(target)
    fitting = _fitting(base, target)
    assert 0 < fitting < len(target.weights)
    assert export.warm_start(target, str(tmp_path / "new")) == fitting
    after, want = _names(target), _names(base)
    copied = [n for n in after if not np.array_equal(after[n], before[n])]
    assert sorted(copied) == sorted(n for n in want if want[n].shape == before[n].shape
                                    and not np.array_equal(want[n], before[n]))
    for name in copied:
        np.testing.assert_array_equal(after[name], want[name])
    # A model pushed before the weights file existed: read through Keras.
    base.save(str(tmp_path / "old"), save_format="tf")
    assert not os.path.exists(tmp_path / "old" / (export.WEIGHTS + ".index"))
    fresh = _mlp((8, 6), seed=3)
    assert export.warm_start(fresh, str(tmp_path / "old")) == fitting


def test_each_hidden_layer_starts_from_its_own_weights(tmp_path):
    """Two hidden layers of one width: each weight has a name of its own (once, both were
    "ensemble/kernel:0", and a warm start gave the first layer the second's bias)."""
    base = _mlp((8, 8), seed=1)
    assert len(_names(base)) == len(base.weights)
    export.write_weights(base, str(tmp_path / "base"))
    target = _mlp((8, 8), seed=2)
    assert export.warm_start(target, str(tmp_path / "base")) == len(target.weights)
    for got, want in zip(target.weights, base.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=got.name)


def test_a_warm_start_from_another_architecture_says_so_and_starts_afresh(tmp_path):
    """A serving model none of whose weights fit (the 32-16 MLP of an earlier lockstep, say):
    one line that says so, and the model keeps its own initial weights."""
    from trainer_module import train

    inputs = {k: tf.keras.Input(shape=(), name=k) for k in ("a_xf", "b_xf")}
    x = tf.keras.layers.Dense(32, name="dense_0")(tf.stack(list(inputs.values()), axis=1))
    old = tf.keras.Model(inputs, tf.keras.layers.Dense(3, name="logits")(x))
    old.save(str(tmp_path / "old"), save_format="tf")
    export.write_weights(old, str(tmp_path / "old"))
    target = _mlp((8, 6), seed=2)
    before = _names(target)
    warm, why = train._warm_start(target, str(tmp_path / "old"))
    assert not warm
    assert why.startswith("none of the serving model's weights fit this model (another "
                          "architecture): trained from scratch")
    after = _names(target)
    assert all(np.array_equal(after[n], before[n]) for n in before)


def test_the_built_in_models_shape_is_the_configs_alone():
    """model.tabular without a config is the model a run trains: TrainerConfig's defaults, the
    one place they are written (the benchmarks build it so)."""
    import inspect

    defaults = TrainerConfig()
    model = model_lib.tabular(["a_xf"], {"k_xf": 5}, 3, "classification")
    head = model.get_layer("ensemble")
    assert (head.members, head.hidden_units) == (defaults.ensemble_members,
                                                  defaults.hidden_units)
    assert model.get_layer(table_stack.NAME).dim == defaults.embedding_dim
    # No number of the model's shape as a default anywhere in its builder's signature.
    signature = inspect.signature(model_lib.tabular)
    assert not [p for p in signature.parameters.values()
                if isinstance(p.default, (int, float, tuple)) and p.default is not None]
