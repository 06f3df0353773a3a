"""The weights' moving average (trainer_module/weight_average.py), in process on a tiny model:
the average after each step of two replicas is the formula's, on every replica's copy; early
stopping scores and keeps the averaged weights and gives the model its trained weights back; a
momentum outside [0, 1) is refused in one line. The whole runs (tests/test_elastic_resume.py,
tests/test_gpu_machines.py) and the equivalence check (tests/test_equivalence.py) hold the
averaged model against one device's."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import early_stopping, loop, weight_average
from trainer_module.settings import TrainerConfig, TrainerConfigError

from test_controller import GLOBAL_BATCH, _dataset, _strategy, tiny_model


def test_the_momentum_follows_the_weights_closely_in_the_first_steps():
    assert float(weight_average.momentum_at(0.99, 1)) == pytest.approx(2 / 11)
    assert float(weight_average.momentum_at(0.99, 100)) == pytest.approx(101 / 110)
    assert float(weight_average.momentum_at(0.99, 10_000)) == pytest.approx(0.99)


def test_two_replicas_average_each_step_by_the_formula_on_every_copy():
    strategy = _strategy(2)
    with strategy.scope():
        model, optimizer = tiny_model()
        average = weight_average.WeightAverage(model, 0.9)
    xent = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    step_loop = loop.SynchronousLoop(strategy, model, optimizer, xent, GLOBAL_BATCH,
                                     _dataset(strategy), weight_average=average)
    expected = [w.numpy() for w in model.trainable_variables]
    for step in range(1, 7):
        step_loop.train(1)
        m = float(weight_average.momentum_at(0.9, step))
        expected = [m * e + (1 - m) * w.numpy() for e, w in zip(expected, model.trainable_variables)]
    assert int(optimizer.iterations.numpy()) == 6
    for want, got, weight in zip(expected, average.averages, model.trainable_variables):
        copies = [v.numpy() for v in got.values]
        assert len(copies) == 2
        for copy in copies:
            np.testing.assert_allclose(copy, want, rtol=1e-6, atol=1e-7)
        assert not np.allclose(want, weight.numpy())  # an average, not the last weights


def test_early_stopping_scores_and_keeps_the_averaged_weights():
    model, optimizer = tiny_model()
    best = early_stopping.BestWeights(model)
    average = weight_average.WeightAverage(model, 0.9)
    for a in average.averages:
        a.assign(tf.fill(a.shape, 0.25))
    trained = [w.numpy() for w in model.trainable_variables]
    seen = []

    def score():
        seen.append(model.trainable_variables[0].numpy().copy())
        return 0.5

    score.rows = 10
    stopping = early_stopping.EarlyStopping(model, best, score, 1, 3, weight_average=average)
    logs = {}
    stopping(1, logs)
    assert logs[early_stopping.VALIDATION_LOSS] == 0.5
    np.testing.assert_array_equal(seen[0], np.full_like(trained[0], 0.25))  # scored averaged
    for weight, was in zip(model.trainable_variables, trained):  # trained on as they were
        np.testing.assert_array_equal(weight.numpy(), was)
    stopping.end(1, logs)  # the kept weights put back: the averaged ones
    for weight in model.trainable_variables:
        np.testing.assert_array_equal(weight.numpy(), np.full(weight.shape, 0.25, np.float32))
    # The summary's momentum is the one in effect at the kept step (1): (1 + 1) / (10 + 1), not
    # 0.9 (an average over about 1 step, not 10).
    assert stopping.summary(1).averaged == pytest.approx(2 / 11)


@pytest.mark.parametrize("momentum", [1.0, -0.1])
def test_a_momentum_outside_0_to_1_is_refused_in_one_line(momentum):
    with pytest.raises(TrainerConfigError, match="trainer.weight_average is a momentum") as error:
        TrainerConfig(weight_average=momentum).validate()
    assert "\n" not in str(error.value)


def test_a_checkpoint_keeps_the_models_keys_and_adds_the_averages(tmp_path):
    """Tracked beside the model (the Controller's checkpoints), the averages are saved under
    their own keys and the model's weights under the model's, as before averaging."""
    model, _ = tiny_model()
    average = weight_average.WeightAverage(model, 0.9)
    path = tf.train.Checkpoint(model=model, average=average).write(str(tmp_path / "ckpt"))
    keys = list(tf.train.load_checkpoint(path).get_variable_to_shape_map())
    assert len([k for k in keys if k.startswith("model/")]) == len(model.weights)
    assert len([k for k in keys if k.startswith("average/averages/")]) == len(model.weights)
    assert not [k for k in keys if k.startswith("average/") and "averages" not in k]
