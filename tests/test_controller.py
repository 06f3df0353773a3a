"""The Controller and its actions, in process on a tiny model: checkpoints exactly on multiples of
checkpoint_every, a resumed run equal to an uninterrupted one, actions at their steps, typed
progress records, TensorBoard scalars."""

import glob
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from runtime import progress, termination
from trainer_module import actions, controller as controller_lib, loop

GLOBAL_BATCH = 8
CHUNK_ENDS = [3, 5, 8, 10, 13, 15, 18, 20]  # 20 steps, steps_per_execution 3, checkpoint_every 5


class Stop(Exception):
    """Raised by an action to cut a run short (a kill, in process)."""


def _strategy(replicas: int) -> tf.distribute.Strategy:
    if replicas == 1:
        return tf.distribute.get_strategy()
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def _dataset(strategy, skip_steps: int = 0):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH, drop_remainder=True)
    return strategy.experimental_distribute_dataset(ds.skip(skip_steps))


def tiny_model():
    """(model, optimizer): two dense layers on 4 numbers, Adam; make them in a strategy's scope."""
    init = tf.keras.initializers.GlorotUniform
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(4,)),
        tf.keras.layers.Dense(8, activation="relu", kernel_initializer=init(seed=1)),
        tf.keras.layers.Dense(2, kernel_initializer=init(seed=2))])
    return model, tf.keras.optimizers.Adam(0.05)


def _controller(directory, *, replicas: int = 1, total: int = 20, every: int = 5, spe: int = 3,
                actions_=()):
    """A Controller and its Trainer, the Trainer's input skipping what the Controller restored."""
    strategy = _strategy(replicas)
    with strategy.scope():
        model, optimizer = tiny_model()
        metrics = {"accuracy": tf.keras.metrics.SparseCategoricalAccuracy("train_accuracy")}
    controller = controller_lib.Controller(
        model, optimizer, directory=str(directory), total_steps=total, steps_per_execution=spe,
        checkpoint_every=every, actions=actions_, strategy=strategy, max_to_keep=None)
    xent = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    trainer = loop.SynchronousLoop(strategy, model, optimizer, xent, GLOBAL_BATCH,
                           _dataset(strategy, controller.start_step), metrics=metrics)
    return controller, trainer, model


def _checkpoint_steps(controller) -> list[int]:
    return [int(path.rsplit("-", 1)[1]) for path in controller.manager.checkpoints]


def test_a_checkpoint_of_other_variables_stops_the_restore_naming_it(tmp_path):
    """A checkpoint that does not hold the model's variables (another model, another layout of
    its tables) is refused, where TensorFlow would restore what matched and leave the rest as
    drawn: here the first layer only."""
    other = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(8)])
    tf.train.CheckpointManager(tf.train.Checkpoint(model=other), str(tmp_path),
                               max_to_keep=None).save(checkpoint_number=5)
    with pytest.raises(controller_lib.CheckpointMismatch, match="ckpt-5 does not hold"):
        _controller(tmp_path)


@pytest.mark.parametrize("total, want", [(20, [5, 10, 15, 20]), (22, [5, 10, 15, 20, 22])])
def test_checkpoints_land_exactly_on_multiples_of_checkpoint_every(tmp_path, total, want):
    chunk_ends = []
    controller, trainer, _ = _controller(tmp_path, total=total,
                                         actions_=[lambda step, logs: chunk_ends.append(step)])
    assert controller.start_step == 0
    logs = controller.train(trainer)
    assert _checkpoint_steps(controller) == want
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith(f"ckpt-{total}")
    assert chunk_ends == CHUNK_ENDS + ([22] if total == 22 else [])  # 20 -> 22: the rest
    assert int(controller.global_step.numpy()) == total
    assert set(logs) == {"loss", "accuracy", "steps"}


@pytest.mark.parametrize("replicas", [1, 2])
def test_resumed_run_restores_and_ends_with_the_same_weights(tmp_path, replicas):
    whole, trainer, model = _controller(tmp_path / "whole", replicas=replicas)
    whole.train(trainer)
    want = [w.numpy() for w in model.weights]

    def kill(step, logs):
        if step >= 10:
            raise Stop
    cut, trainer, _ = _controller(tmp_path / "cut", replicas=replicas, actions_=[kill])
    with pytest.raises(Stop):
        cut.train(trainer)
    assert _checkpoint_steps(cut) == [5, 10]

    resumed, trainer, model = _controller(tmp_path / "cut", replicas=replicas)
    assert resumed.start_step == 10
    resumed.train(trainer)
    assert _checkpoint_steps(resumed) == [5, 10, 15, 20]
    assert any(np.abs(w).sum() for w in want)
    for got, expected in zip([w.numpy() for w in model.weights], want):
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_conditional_action_fires_every_n_steps_and_at_the_end(tmp_path):
    fired = []
    every_6 = actions.ConditionalAction(actions.EveryNSteps(6, final_step=20),
                                        lambda step, logs: fired.append(step))
    controller, trainer, _ = _controller(tmp_path, actions_=[every_6])
    controller.train(trainer)
    assert fired == [8, 15, 20]  # chunk ends 3 5 8 10 13 15 18 20: 6 steps since the last, or 20


def test_conditions_count_from_the_start_step_and_the_clock():
    steps = actions.EveryNSteps(10, final_step=35)
    steps.begin(20)  # resumed at 20
    assert [s for s in (25, 30, 33, 35) if steps(s, {})] == [30, 35]
    now = [0.0]
    seconds = actions.EveryNSeconds(1.0, final_step=9, clock=lambda: now[0])
    seconds.begin(0)
    fired = []
    for step, t in [(1, 5.0), (2, 5.5), (3, 6.0), (4, 6.2), (9, 6.3)]:
        now[0] = t
        if seconds(step, {}):
            fired.append(step)
    assert fired == [3, 9]  # not the first chunk (it traces), then once a second, and the last


def test_progress_records_are_typed_and_the_log_line_is_written(tmp_path, caplog):
    acts = actions.standard_actions(total_steps=20, global_batch=GLOBAL_BATCH, log_every=10,
                                    progress_seconds=0.0)
    controller, trainer, _ = _controller(tmp_path, actions_=acts)
    with caplog.at_level(logging.INFO, logger=progress.PROGRESS_LOGGER), \
            caplog.at_level(logging.INFO, logger="absl"):
        logs = controller.train(trainer)
    records = [r for r in caplog.records if r.name == progress.PROGRESS_LOGGER]
    reported = [progress.Progress.from_dict(r.progress) for r in records]
    assert [p.step for p in reported] == CHUNK_ENDS[1:]  # the first chunk traces: no rate yet
    assert set(records[0].progress) == {"step", "total", "loss", "examples_per_sec", "eta"}
    last = reported[-1]
    assert (last.total, last.eta) == (20, 0.0) and last.examples_per_sec > 0
    assert last.loss == pytest.approx(logs["loss"])
    assert all(p.eta > 0 for p in reported[:-1])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")
             and r.name != progress.PROGRESS_LOGGER]
    assert [line.split()[1] for line in lines] == ["10/20", "20/20"]
    assert "  loss " in lines[-1] and "  accuracy " in lines[-1] and "examples_per_sec" in lines[-1]


def test_summaries_write_the_scalars_to_tensorboard_event_files(tmp_path):
    summary_dir = actions.summary_dir(str(tmp_path / "run"))
    acts = actions.standard_actions(total_steps=20, global_batch=GLOBAL_BATCH, log_every=100,
                                    summary_dir=summary_dir, learning_rate=lambda step: 0.05)
    controller, trainer, _ = _controller(tmp_path / "ckpt", actions_=acts)
    controller.train(trainer)
    scalars: dict[str, dict[int, float]] = {}
    for path in glob.glob(os.path.join(summary_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    assert set(scalars) == {"loss", "accuracy", "examples_per_sec", "learning_rate"}
    assert sorted(scalars["loss"]) == CHUNK_ENDS
    assert scalars["learning_rate"][20] == pytest.approx(0.05)
    assert all(v > 0 for v in scalars["examples_per_sec"].values())


def test_on_one_machine_the_workers_agreement_is_this_process_flag(tmp_path):
    """No collective without other workers: the agreement on a SIGTERM is the flag itself
    (several worker processes: tests/test_elastic_resume.py)."""
    import signal

    controller, _, _ = _controller(tmp_path)
    assert controller.agree._summed is None and controller.agree() == []
    with pytest.raises(termination.Preempted, match=r"^stopped by SIGTERM at step 1: a "):
        with termination.checkpoint_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            assert controller.agree() == ["this process"]
            raise termination.Preempted(1, "ckpt-1", controller.agree())


@pytest.mark.parametrize("replicas", [1, 2])
def test_sigterm_saves_at_the_step_reached_and_the_resumed_run_ends_the_same(tmp_path, replicas):
    """SIGTERM (what Kubernetes sends a pod it evicts) arrives mid-chunk: the chunk ends, a
    checkpoint is saved at that step, off the checkpoint_every grid, Preempted is raised; the
    process keeps its own SIGTERM handler afterwards, and a resumed run ends with an
    uninterrupted run's weights."""
    import signal

    whole, trainer, model = _controller(tmp_path / "whole", replicas=replicas)
    whole.train(trainer)
    want = [w.numpy() for w in model.weights]

    def evicted(step, logs):
        if step == 10:
            os.kill(os.getpid(), signal.SIGTERM)  # handled between chunks: after step 13
    before = signal.getsignal(signal.SIGTERM)
    cut, trainer, _ = _controller(tmp_path / "cut", replicas=replicas, actions_=[evicted])
    with pytest.raises(termination.Preempted, match=r"stopped by SIGTERM at step 13: a "
                                                    r"checkpoint was saved there \(.*ckpt-13\)"):
        cut.train(trainer)
    assert signal.getsignal(signal.SIGTERM) is before and not termination.requested()
    assert _checkpoint_steps(cut) == [5, 10, 13]

    resumed, trainer, model = _controller(tmp_path / "cut", replicas=replicas)
    assert resumed.start_step == 13
    resumed.train(trainer)
    for got, expected in zip([w.numpy() for w in model.weights], want):
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_sigterm_after_the_last_look_at_the_flag_goes_on_to_the_handler_before(tmp_path):
    """SIGTERM arrives at the last step, after the Controller looked at the flag for the last
    time (as the final checkpoint is saved, as early stopping ends training): training ends as
    planned, its last checkpoint saved, and the stop reaches the handler the process had (the
    local runner's, which stops the run, naming the Trainer), not dropped."""
    import signal

    from runtime import termination

    def late(step, logs):
        if step == 20:
            os.kill(os.getpid(), signal.SIGTERM)
    controller, trainer, _ = _controller(tmp_path, actions_=[late])
    with pytest.raises(termination.Stopped, match="^stopped by SIGTERM while Trainer ran$"):
        with termination.stop_on_sigterm(lambda: "stopped by SIGTERM while Trainer ran"):
            controller.train(trainer)
    assert _checkpoint_steps(controller)[-1] == 20 and not termination.requested()


@pytest.mark.parametrize("damage", ["zeroed", "truncated", "missing"])
def test_an_unreadable_last_checkpoint_falls_back_to_the_one_before(tmp_path, caplog, damage):
    def stop(step, logs):
        if step >= 15:
            raise Stop
    cut, trainer, _ = _controller(tmp_path, actions_=[stop])
    with pytest.raises(Stop):
        cut.train(trainer)
    [data] = glob.glob(str(tmp_path / "ckpt-15.data-*"))
    content = bytearray(open(data, "rb").read())
    if damage == "zeroed":
        content[8:40] = bytes(32)
        open(data, "wb").write(bytes(content))
    elif damage == "truncated":
        open(data, "wb").write(bytes(content[: len(content) // 2]))
    else:
        os.remove(data)
    with caplog.at_level(logging.WARNING, logger="absl"):
        resumed, trainer, _ = _controller(tmp_path)
    assert resumed.start_step == 10
    [line] = [r.getMessage() for r in caplog.records if "does not read" in r.getMessage()]
    assert line.startswith(f"Checkpoint {tmp_path}/ckpt-15 does not read (")
    assert resumed.unreadable == [f"{tmp_path}/ckpt-15"]
    assert glob.glob(str(tmp_path / "ckpt-15.*")) == []  # gone, and out of the state
    assert _checkpoint_steps(resumed) == [5, 10]
    resumed.train(trainer)
    assert _checkpoint_steps(resumed) == [5, 10, 15, 20]


def test_once_sigterm_arrived_a_stop_block_ends_with_stopped_whatever_else_it_ends_with():
    """SIGTERM's raise in the middle of an import or a library's code can come out as another
    error (a TypeError), or be swallowed outright: the block ends with the Stopped all the same,
    the other error as its cause; without a SIGTERM, errors and returns are untouched."""
    import signal

    from runtime import termination

    with pytest.raises(termination.Stopped, match="^stopped by SIGTERM while A ran$") as raised:
        with termination.stop_on_sigterm(lambda: "stopped by SIGTERM while A ran"):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            except termination.Stopped:
                raise TypeError("unsupported callable") from None
    assert isinstance(raised.value.__cause__, TypeError)
    with pytest.raises(termination.Stopped):
        with termination.stop_on_sigterm(lambda: "stopped by SIGTERM while B ran"):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            except Exception:  # noqa: BLE001  swallowed, as code that catches everything does
                pass
    with pytest.raises(termination.Stopped, match="^stopped by SIGTERM while C ran$"):
        with termination.stop_on_sigterm(lambda: "stopped by SIGTERM while C ran"):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            except termination.Stopped as err:  # as Keras re-raises it, naming the layer
                raise termination.Stopped(  # noqa: B904  as Keras wraps it: no cause kept
                    f"Exception encountered when calling layer: {err}")
    with pytest.raises(TypeError):
        with termination.stop_on_sigterm(lambda: "never"):
            raise TypeError("its own")
    with termination.stop_on_sigterm(lambda: "never") as check:
        check()
