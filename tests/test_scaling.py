import pytest
import tensorflow as tf

from pipeline.config import TrainerConfig
from trainer_module import scaling, warmup


def cfg(**kw):
    return TrainerConfig(**kw)


def test_steps_from_example_budget():
    assert scaling.make_plan(cfg(global_batch=1000, train_examples=100_000), 1).train_steps == 100
    assert scaling.make_plan(cfg(global_batch=4000, train_examples=100_000), 8).train_steps == 25


def test_per_replica_batch_fixed_global_grows_lr_scales():
    small = scaling.make_plan(cfg(per_replica_batch=128, base_batch=128, base_learning_rate=0.1,
                                  train_examples=1_048_576), 4)
    big = scaling.make_plan(cfg(per_replica_batch=128, base_batch=128, base_learning_rate=0.1,
                                train_examples=1_048_576), 16)
    assert (small.global_batch, big.global_batch) == (512, 2048)
    assert big.train_steps * 4 == small.train_steps
    assert small.learning_rate == pytest.approx(0.4) and big.learning_rate == pytest.approx(1.6)
    assert small.examples == big.examples


def test_global_batch_must_divide():
    with pytest.raises(scaling.ScalingError, match="global_batch=100 does not divide evenly over 8"):
        scaling.make_plan(cfg(global_batch=100), 8, train_rows=1000)


def test_tpu_warns_when_per_replica_batch_is_not_a_multiple_of_8():
    assert scaling.make_plan(cfg(per_replica_batch=12, train_steps=10), 8, on_tpu=True).warnings
    assert not scaling.make_plan(cfg(per_replica_batch=128, train_steps=10), 8, on_tpu=True).warnings
    assert not scaling.make_plan(cfg(per_replica_batch=12, train_steps=10), 8, on_tpu=False).warnings


def test_default_budget_is_epochs_over_the_training_rows():
    plan = scaling.make_plan(cfg(per_replica_batch=32, epochs=2.0), 4, train_rows=100_000)
    assert plan.train_steps == 1563 and plan.examples == 1563 * 128  # ceil(200_000 / 128)
    assert plan.budget == "2 epochs over 100000 training rows"
    # The same data on 4x the replicas: a quarter of the steps, the same examples (about).
    bigger = scaling.make_plan(cfg(per_replica_batch=32, epochs=2.0), 16, train_rows=100_000)
    assert bigger.train_steps == 391
    # Small data: at least min_train_examples.
    small = scaling.make_plan(cfg(epochs=2.0, min_train_examples=12_800), 1, train_rows=275)
    assert small.train_steps == 400 and "min_train_examples" in small.budget
    assert scaling.make_plan(cfg(epochs=2.0), 4, train_rows=275).train_steps == 100
    with pytest.raises(scaling.ScalingError, match="give the training split's row count"):
        scaling.make_plan(cfg(), 1)


def test_fixed_train_steps_win_over_budget():
    assert scaling.make_plan(cfg(train_steps=7, train_examples=10**6), 2).train_steps == 7


def test_warmup_is_linear_then_flat():
    schedule = warmup.WarmupSchedule(1.0, 4)
    values = [float(schedule(tf.constant(s))) for s in range(6)]
    assert values == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


def test_plan_describes_the_one_update_rule():
    text = scaling.make_plan(cfg(per_replica_batch=8), 8, train_rows=10_000).describe()
    assert "global batch          64  (= 8 x 8)" in text and "one optimizer update" in text
