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
    # Adam's rule, the square root: 4x the global batch, 2x the rate.
    assert small.learning_rate == pytest.approx(0.2) and big.learning_rate == pytest.approx(0.4)
    assert "learning rate         0.4  (= 0.1 x sqrt(2048 / 128); trainer.lr_scaling)" in \
        big.describe()
    assert small.examples == big.examples
    # SGD's, in proportion, when asked for.
    linear = [scaling.make_plan(cfg(per_replica_batch=128, base_batch=128, base_learning_rate=0.1,
                                    train_examples=1_048_576, lr_scaling="linear"), replicas)
              for replicas in (4, 16)]
    assert [p.learning_rate for p in linear] == [pytest.approx(0.4), pytest.approx(1.6)]
    assert "(= 0.1 x 2048 / 128)" in linear[1].describe()


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


def test_a_large_table_plans_to_the_ceiling_and_says_the_validation_rows_decide():
    plan = scaling.make_plan(cfg(), 1, train_rows=3_000_000)
    assert plan.examples == plan.train_steps * plan.global_batch >= 2_000_000
    assert plan.budget == ("trainer.max_train_examples, a ceiling; 40 epochs over 3000000 training "
                           "rows would be more; the validation rows decide when to stop within it")
    unvalidated = scaling.make_plan(cfg(validation_share=0.0), 1, train_rows=3_000_000)
    assert unvalidated.budget.endswith("would be more")


def test_fixed_train_steps_win_over_budget():
    assert scaling.make_plan(cfg(train_steps=7, train_examples=10**6), 2).train_steps == 7


def test_warmup_is_linear_then_flat():
    schedule = warmup.WarmupSchedule(1.0, 4)
    values = [float(schedule(tf.constant(s))) for s in range(6)]
    assert values == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


def test_the_last_steps_decay_linearly_to_a_small_last_rate():
    schedule = warmup.WarmupSchedule(1.0, 2, total_steps=10, decay_steps=4)
    values = [float(schedule(tf.constant(s))) for s in range(10)]
    assert values == pytest.approx([0.5, 1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25])


def test_a_horizon_moves_the_decay_to_a_cooldown_and_is_the_plans_until_then():
    horizon = warmup.Horizon(total_steps=10, decay_steps=4)
    schedule = warmup.WarmupSchedule(1.0, 2, total_steps=10, decay_steps=4, horizon=horizon)
    planned = [float(schedule(tf.constant(s))) for s in range(10)]
    assert planned == pytest.approx([0.5, 1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25])
    assert not horizon.cooling
    horizon.cool_down(3, 2)  # validation stopped improving at step 3: two steps of decay
    assert horizon.cooling
    values = [float(schedule(tf.constant(s))) for s in range(7)]
    assert values == pytest.approx([0.5, 1, 1, 1, 0.5, 0, 0])
    # No decay planned (trainer.decay_share = 0): no horizon, flat to the end.
    flat = warmup.WarmupSchedule(1.0, 1, total_steps=10, decay_steps=0, horizon=horizon)
    assert flat.horizon is None and float(flat(tf.constant(9))) == 1.0


@pytest.mark.parametrize("share, steps, decay", [(0.2, 1000, 200), (0.0, 1000, 0), (0.5, 30, 10)])
def test_plan_decays_the_last_share_of_the_steps_after_the_warmup(share, steps, decay):
    """decay_steps: the last share of the steps, never into the warmup (20 steps)."""
    plan = scaling.make_plan(cfg(train_steps=steps, decay_share=share), 1)
    assert (plan.warmup_steps, plan.decay_steps) == (20, decay)
    assert f"decay steps           {decay}  " in plan.describe()


def test_plan_describes_the_one_update_rule():
    text = scaling.make_plan(cfg(per_replica_batch=8), 8, train_rows=10_000).describe()
    assert "global batch          64  (= 8 x 8)" in text and "one optimizer update" in text


def test_default_batch_fits_the_hardware_and_the_data():
    # No batch setting: the hardware's batch where the data has room for it...
    cpu = scaling.make_plan(cfg(), 1, train_rows=269_200)
    assert (cpu.per_replica_batch, cpu.global_batch) == (256, 256)
    assert cpu.batch_source == ("the default for a CPU replica; trainer.per_replica_batch sets it")
    tpu = scaling.make_plan(cfg(), 8, on_tpu=True, train_rows=10**6)
    assert (tpu.per_replica_batch, tpu.global_batch) == (128, 1024) and not tpu.warnings
    assert scaling.make_plan(cfg(), 2, train_rows=10**6, hardware="gpu").per_replica_batch == 256
    # ... halved until an epoch is at least MIN_STEPS_PER_EPOCH global steps, not below 32.
    mid = scaling.make_plan(cfg(), 1, train_rows=8_060)
    assert mid.per_replica_batch == 64 and 8_060 // mid.global_batch >= scaling.MIN_STEPS_PER_EPOCH
    assert "halved to 64 so an epoch of 8060 rows is at least 100 steps" in mid.batch_source
    replicas = scaling.make_plan(cfg(), 4, train_rows=8_060)  # the replicas share the epoch
    assert replicas.per_replica_batch == 32 and replicas.global_batch == 128
    tiny = scaling.make_plan(cfg(), 1, train_rows=272)
    assert tiny.per_replica_batch == 32
    assert "halved to the smallest, 32: an epoch of 272 rows is fewer than 100" in tiny.batch_source
    # The learning rate follows the batch by the one rule (the square root, by default).
    assert mid.learning_rate == pytest.approx(cfg().base_learning_rate * (64 / cfg().base_batch) ** 0.5)
    # A setting wins, and the plan says which.
    fixed = scaling.make_plan(cfg(per_replica_batch=32), 1, train_rows=269_200)
    assert fixed.per_replica_batch == 32 and fixed.batch_source == "trainer.per_replica_batch"
    assert scaling.make_plan(cfg(global_batch=512), 2, train_rows=100).batch_source == (
        "trainer.global_batch=512")
    assert "per-replica batch     256  (the default for a CPU replica" in cpu.describe()
    # Without a row count (fixed steps, `lockstep plan` with no data): the hardware's.
    assert not scaling.needs_rows(cfg(per_replica_batch=32, train_steps=10))
    assert scaling.needs_rows(cfg(train_steps=10))
    assert scaling.make_plan(cfg(train_steps=10), 1).per_replica_batch == 256
