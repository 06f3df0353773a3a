"""Early stopping (trainer_module/early_stopping.py), in process on a tiny model under the real
Controller: scores at their steps, a stop after `patience` scores without a new best, the best
weights put back at the end, and a run killed and resumed from its checkpoint that stops at the
same step and keeps the same weights as an uninterrupted one; then on real rows: the validation
part and the fit part of a split never share a record."""

import math

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import controller as controller_lib, early_stopping, input_pipeline, loop
from trainer_module import least_gain, warmup

from test_controller import GLOBAL_BATCH, Stop, _dataset, tiny_model


class Scores:
    """A score function whose score is a function of the global step (values[step // every],
    so a resumed run scores as the uninterrupted one did), which remembers the model's first
    weight each time it scored (to check which weights were kept)."""

    def __init__(self, model, optimizer, values, every):
        self.model, self.optimizer, self.values, self.every = model, optimizer, list(values), every
        self.calls, self.seen, self.rows = 0, [], 0  # rows: as validation_loss's, once scored

    def __call__(self):
        index = int(self.optimizer.iterations.numpy()) // self.every - 1
        self.calls, self.rows = self.calls + 1, 10
        self.seen.append(self.model.weights[0].numpy().copy())
        return self.values[min(index, len(self.values) - 1)]


def _run(tmp_path, values, *, kill_at=None, patience=3, every=2, total=20, decay=0):
    """A Controller (20 steps, chunks of 3 ending on multiples of 5) with early stopping every
    `every` steps, the best weights saved with its checkpoints; kill_at: cut the run at that
    step, then resume it from its checkpoints in a new Controller, as a new process would.
    decay: the plan's decay steps, with a horizon that early stopping's cooldown moves (the
    rate 0.05, a cooldown of decay_share 0.5)."""

    def build(extra=()):
        with tf.distribute.get_strategy().scope():
            model, optimizer = tiny_model()
            horizon = warmup.Horizon(total, decay) if decay else None
            best = early_stopping.BestWeights(model, horizon)
            schedule = warmup.WarmupSchedule(0.05, 1, total, decay, horizon) if decay else None
            if schedule:
                optimizer = tf.keras.optimizers.Adam(schedule)
        scores = Scores(model, optimizer, values, every)
        stopping = early_stopping.EarlyStopping(model, best, scores, every, patience,
                                                cooldown_share=0.5, chunk=1)
        controller = controller_lib.Controller(
            model, optimizer, directory=str(tmp_path), total_steps=total, steps_per_execution=3,
            checkpoint_every=5, actions=[stopping, *extra], max_to_keep=None,
            tracked={"best": best})
        xent = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
        trainer = loop.SynchronousLoop(tf.distribute.get_strategy(), model, optimizer, xent,
                                       GLOBAL_BATCH, _dataset(tf.distribute.get_strategy(),
                                                              controller.start_step))
        return {"controller": controller, "trainer": trainer, "model": model,
                "stopping": stopping, "scores": scores, "schedule": schedule}

    def kill(step, logs):
        if step >= kill_at:
            raise Stop()

    run = build([kill] if kill_at is not None else [])
    try:
        logs = run["controller"].train(run["trainer"])
    except Stop:
        run = build()
        assert run["controller"].start_step > 0
        logs = run["controller"].train(run["trainer"])
    return run, logs


def test_a_new_best_must_beat_the_old_by_a_margin():
    assert least_gain.better(0.5, math.inf)
    assert least_gain.better(0.4, 0.5)
    assert not least_gain.better(0.4999, 0.5)  # less than 0.1 %
    assert not least_gain.better(0.00005, 0.0001)  # near zero: less than 1e-4
    assert not least_gain.better(math.nan, 0.5)


def test_training_stops_after_patience_scores_without_a_new_best_and_keeps_the_best(tmp_path):
    # Scored at the chunk ends past 2, 4, 6, ... (chunks end at 3, 5, 6, 8, 10, ...).
    holder, logs = _run(tmp_path, [1.0, 0.5, 0.6, 0.7, 0.8, 0.9])
    controller, scores, model = holder["controller"], holder["scores"], holder["model"]
    assert holder["stopping"].stopped_early
    assert scores.calls == 5  # the best, then three without: stopped at the fifth
    assert controller.step < 20
    summary = holder["stopping"].summary(controller.step)
    assert summary.stopped_early and summary.best_step < summary.stopped_at == controller.step
    assert logs["best_step"] == summary.best_step
    # The model ends with the weights it had at the best score (the second).
    np.testing.assert_array_equal(model.weights[0].numpy(), scores.seen[1])
    assert not np.array_equal(scores.seen[1], scores.seen[-1])


def test_a_run_that_keeps_improving_runs_every_step_and_keeps_the_last(tmp_path):
    holder, logs = _run(tmp_path, [1.0 / (i + 1) for i in range(30)])
    controller, stopping = holder["controller"], holder["stopping"]
    assert controller.step == 20 and not stopping.stopped_early
    assert logs["best_step"] == 20


def test_a_best_too_near_zero_to_beat_stops_at_once_and_keeps_its_weights(tmp_path):
    """A validation loss of 5e-5: no later score can be lower by the least gain that counts
    (1e-4), so the scores patience would wait for are not taken (a 10,000-row table that the
    model separates: 620 steps)."""
    holder, logs = _run(tmp_path, [1.0, 0.5, 5e-5, 1e-5, 0.0])
    controller, scores, stopping = holder["controller"], holder["scores"], holder["stopping"]
    assert scores.calls == 3 and stopping.stopped_early and stopping.settled
    summary = stopping.summary(controller.step, 20)
    assert summary.best_step == summary.stopped_at == controller.step == logs["best_step"] < 20
    assert summary.settled and "no later score could beat it" in summary.words(20)
    np.testing.assert_array_equal(holder["model"].weights[0].numpy(), scores.seen[2])
    # A best above the least gain waits for patience as before.
    again, _ = _run(tmp_path / "above", [1.0, 0.5, 3e-4, 2.5e-4, 2.5e-4, 2.5e-4, 2.5e-4])
    assert again["scores"].calls == 6 and not again["stopping"].settled


COOLING = [1.0, 0.5, 0.55, 0.6, 0.7, 0.8, 0.45, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]  # by step // 2 - 1


def test_patience_out_before_the_planned_decay_cools_down_from_the_best_weights(tmp_path):
    """Patience runs out at step 13 of 60 (the plan decays over the last 12): the best weights
    (step 5's) are put back, the rate decays to zero over half of a run of their steps and the
    cooldown (5 steps: 5 x 0.5 / 0.5), still scored (step 15's 0.45 is a new best, made from
    step 5's weights), and training stops where the cooldown ends."""
    holder, logs = _run(tmp_path, COOLING, total=60, decay=12)
    controller, scores, stopping = holder["controller"], holder["scores"], holder["stopping"]
    summary = stopping.summary(controller.step, 60)
    assert summary.cooled_from == 13 and stopping.horizon.cooling
    assert int(stopping.horizon.end.numpy()) == 18 == early_stopping.cooldown_steps(5, 0.5, 1) + 13
    assert summary.stopped_early and summary.stopped_at == controller.step == 18
    assert summary.best_step == logs["best_step"] == 15
    # The cooldown began from the best weights: the score at 15 saw step 5's weights trained on.
    np.testing.assert_array_equal(holder["model"].weights[0].numpy(), scores.seen[5])
    schedule = holder["schedule"]
    rates = [float(schedule(tf.constant(step))) for step in (12, 13, 14, 16, 17, 18)]
    assert rates == pytest.approx([0.05, 0.05, 0.04, 0.02, 0.01, 0.0])
    assert summary.words(60).startswith(
        "validation stopped improving at step 13, the rate decayed to zero over 5 steps from "
        "there: stopped at step 18 of 60, kept step 15")
    # Without a horizon (no decay planned) patience ends the run there, as before.
    plain, _ = _run(tmp_path / "plain", COOLING, total=60)
    assert plain["stopping"].summary(plain["controller"].step).stopped_at == 13


def test_in_the_cooldown_any_gain_keeps_the_decayed_weights(tmp_path):
    """Step 15's 0.4999 is below the best (0.5, step 5) by less than the least gain that counts:
    before the cooldown it would not be a new best, but in it the decayed weights are kept over
    the plateau's (AER Fertility's held-out AUC 0.6172 -> 0.6183: its cooldown's end was 0.1 %
    short of the margin)."""
    values = COOLING[:6] + [0.4999] + COOLING[7:]
    holder, logs = _run(tmp_path, values, total=60, decay=12)
    summary = holder["stopping"].summary(holder["controller"].step, 60)
    assert summary.cooled_from == 13 and summary.best_step == logs["best_step"] == 15
    np.testing.assert_array_equal(holder["model"].weights[0].numpy(), holder["scores"].seen[5])
    # Before the cooldown the same small gain is no new best: patience runs out as before.
    plain, _ = _run(tmp_path / "plain", [1.0, 0.5, 0.4999, 0.4998, 0.4997, 0.9], total=60)
    assert plain["stopping"].summary(plain["controller"].step).best_step == 5


@pytest.mark.parametrize("kill_at", [13, 15])
def test_a_run_killed_in_its_cooldown_resumes_to_the_same_stop_and_weights(tmp_path, kill_at):
    whole, _ = _run(tmp_path / "whole", COOLING, total=60, decay=12)
    resumed, _ = _run(tmp_path / "resumed", COOLING, total=60, decay=12, kill_at=kill_at)
    want = whole["stopping"].summary(whole["controller"].step, 60)
    got = resumed["stopping"].summary(resumed["controller"].step, 60)
    assert (got.stopped_at, got.best_step, got.cooled_from) == (
        want.stopped_at, want.best_step, want.cooled_from) == (18, 15, 13)
    for a, b in zip(whole["model"].get_weights(), resumed["model"].get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_large_table_is_scored_every_12800_examples_and_a_small_one_as_before():
    # nycflights13: 947 steps an epoch of batch 256, 7,813 planned: every 50 steps, not 947.
    assert early_stopping.every(7_813, 947, 256) == 50
    # Penguins (8 steps an epoch, 400 planned): every fortieth of the steps (a twentieth before
    # the budget was 40 epochs).
    assert early_stopping.every(400, 8, 32) == early_stopping.every(400, 8) == 10
    # ISLR's Wage (54 steps an epoch, 40 epochs planned): every epoch, as at 20 epochs.
    assert early_stopping.every(2_160, 54, 32) == early_stopping.every(1_080, 54, 32) == 54
    assert early_stopping.cooldown_steps(650, 0.2, 10) == 170  # 162.5, in whole chunks
    # A large table holds out 10,000 validation rows, not a tenth of its rows.
    assert early_stopping.validation_share(0.1, 3_000_000) == pytest.approx(10_000 / 3_000_000)
    assert early_stopping.validation_share(0.1, 250_000) == pytest.approx(0.04)
    assert early_stopping.validation_share(0.1, 100_000) == early_stopping.validation_share(
        0.1, None) == 0.1
    assert early_stopping.cooldown_steps(650, 0.0, 10) == 0


@pytest.mark.parametrize("cooled", [False, True])
def test_a_run_resumed_at_the_checkpoint_it_stopped_at_trains_no_further(tmp_path, cooled):
    """A job started again once it had stopped (a retried task; a first fit trained again before
    its refit resumes, trainer_module/refit.py) resumes at its stop and ends there, with the
    same weights, not a chunk later."""
    values = COOLING if cooled else [1.0, 0.5, 0.6, 0.4, 0.7, 0.8, 0.9, 0.95]
    settings = dict(total=60, decay=12) if cooled else {}
    whole, _ = _run(tmp_path, values, **settings)
    stopped_at = whole["controller"].step
    again, logs = _run(tmp_path, values, **settings)
    assert again["controller"].start_step == again["controller"].step == stopped_at
    want = whole["stopping"].summary(stopped_at, 60)
    assert again["stopping"].summary(stopped_at, 60) == want and want.stopped_early
    assert logs["best_step"] == want.best_step
    for a, b in zip(whole["model"].get_weights(), again["model"].get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kill_at", [5, 10])
def test_a_killed_and_resumed_run_stops_where_an_uninterrupted_one_does(tmp_path, kill_at):
    values = [1.0, 0.5, 0.6, 0.4, 0.7, 0.8, 0.9, 0.95]
    whole, _ = _run(tmp_path / "whole", values)
    resumed, _ = _run(tmp_path / "resumed", values, kill_at=kill_at)
    want = whole["stopping"].summary(whole["controller"].step)
    got = resumed["stopping"].summary(resumed["controller"].step)
    assert (got.stopped_at, got.best_step) == (want.stopped_at, want.best_step)
    for a, b in zip(whole["model"].get_weights(), resumed["model"].get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_the_validation_part_and_the_fit_part_never_share_a_record(tmp_path):
    """Real TFRecords in two files: each record is in one part, about `share` of them in
    validation, the same records every time they are read and for any number of input
    pipelines (replicas, hosts)."""
    spec = {"v": tf.io.FixedLenFeature([], tf.int64), "y_xf": tf.io.FixedLenFeature([], tf.int64)}
    paths = [str(tmp_path / f"rows-{i}.tfrecord.gz") for i in range(2)]
    for i, path in enumerate(paths):
        with tf.io.TFRecordWriter(path, options="GZIP") as writer:
            for v in range(i * 1000, i * 1000 + 1000):
                example = tf.train.Example()
                example.features.feature["v"].int64_list.value.append(v)
                example.features.feature["y_xf"].int64_list.value.append(v % 3)
                writer.write(example.SerializeToString())

    def part(name, pipelines=1):
        fn = input_pipeline.make_dataset_fn(str(tmp_path / "rows-*"), spec, "y", "classification",
                                            256, training=False, part=name, validation_share=0.1)
        return sorted(int(v) for p in range(pipelines) for x, _ in fn(
            tf.distribute.InputContext(pipelines, p, pipelines)) for v in x["v"].numpy())

    fit, validation = part(input_pipeline.FIT), part(input_pipeline.VALIDATION)
    assert len(fit) + len(validation) == 2000 and not set(fit) & set(validation)
    assert 0.07 < len(validation) / 2000 < 0.13
    assert part(input_pipeline.VALIDATION) == validation
    assert part(input_pipeline.VALIDATION, pipelines=2) == validation  # a file per pipeline
    assert part(input_pipeline.VALIDATION, pipelines=4) == validation  # records shared out


def test_the_progress_and_log_line_come_at_the_step_training_stopped():
    """The every-N conditions are true where an action stops training, as at the last step: a
    run that stops early still shows where it ended."""
    from trainer_module import actions

    steps, seconds = actions.EveryNSteps(100, final_step=400), actions.EveryNSeconds(60.0, 400)
    steps.begin(0)
    seconds.begin(0)
    assert not steps(10, {}) and not seconds(10, {})  # the first chunk: the clock starts
    assert not steps(20, {}) and not seconds(20, {})
    stop = {actions.STOP_TRAINING: True}
    assert steps(30, stop) and seconds(30, stop)


def test_the_validation_rows_are_read_once_and_scored_the_same_every_time():
    """A score reads the validation dataset at its first call and keeps its batches: an
    iterator made at every score ran tf.data's rewrites of the transform graph again each time."""
    reads = []

    def rows():
        reads.append(1)
        for i in range(3):
            yield {"x": np.full([4, 1], float(i), np.float32)}, np.arange(4, dtype=np.float32)

    dataset = tf.data.Dataset.from_generator(rows, output_signature=(
        {"x": tf.TensorSpec([4, 1], tf.float32)}, tf.TensorSpec([4], tf.float32)))
    inputs = tf.keras.Input(shape=(1,), name="x")
    model = tf.keras.Model({"x": inputs}, tf.keras.layers.Dense(1, kernel_initializer="ones")(inputs))
    score = early_stopping.validation_loss(
        model, lambda y, out: tf.square(out[:, 0] - y), dataset)
    first = score()
    assert [score() for _ in range(3)] == [first] * 3
    assert len(reads) == 1 and score.rows == 12
    # (x - y)^2 over x in 0, 1, 2 and y in 0..3, mean of 12.
    assert first == pytest.approx(np.mean([(i - j) ** 2 for i in range(3) for j in range(4)]))
