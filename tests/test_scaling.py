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
        scaling.make_plan(cfg(global_batch=100), 8)


def test_tpu_warns_when_per_replica_batch_is_not_a_multiple_of_8():
    assert scaling.make_plan(cfg(per_replica_batch=12), 8, on_tpu=True).warnings
    assert not scaling.make_plan(cfg(per_replica_batch=128), 8, on_tpu=True).warnings
    assert not scaling.make_plan(cfg(per_replica_batch=12), 8, on_tpu=False).warnings


def test_fixed_train_steps_win_over_budget():
    assert scaling.make_plan(cfg(train_steps=7, train_examples=10**6), 2).train_steps == 7


def test_warmup_is_linear_then_flat():
    schedule = warmup.WarmupSchedule(1.0, 4)
    values = [float(schedule(tf.constant(s))) for s in range(6)]
    assert values == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


def test_plan_describes_the_one_update_rule():
    text = scaling.make_plan(cfg(per_replica_batch=8), 8).describe()
    assert "global batch          64  (= 8 x 8)" in text and "one optimizer update" in text
