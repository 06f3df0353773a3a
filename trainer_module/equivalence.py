"""Does this model and loss train synchronously right? N replicas against one device, on the
user's own model and data.

lockstep's claim (trainer_module/loop.py) is that N replicas, each on its slice of a global batch,
make exactly the update one device makes on the whole global batch. It holds for the built-in
model and loss (tests/test_synchronous_training.py); a user's model or loss can break it with no
error at all: a loss averaged over its own batch averages over one replica's batch (the update is
N times too large), BatchNormalization normalizes with per-replica statistics, a random op draws
differently on each replica. `check` trains a few steps both ways from the same initial weights:

(a) lockstep's own loop (`loop.SynchronousLoop`) under MirroredStrategy over `replicas` logical CPU
    devices, each replica fed its slice of each global batch, as a run feeds it;
(b) the outside reference: Keras `model.fit` on one device, no strategy, on the same global
    batches in the same order, from the same initial weights, with the same loss (Keras takes
    the mean of the per-example losses over the batch: their sum / the global batch) and the
    same regularization;

and compares every weight, trainable or not (BatchNormalization's moving statistics too), and,
where trainer.weight_average is on, the weights' averages (trainer_module/weight_average.py: the
same average over Keras' steps, a callback after each batch).

The lockstep side takes the job's own settings: trainer.precision (both sides in that policy; the
tolerance widens to 16-bit rounding), trainer.accumulation_steps (each replica sums that many
micro-batches per update), trainer.jit_compile (the XLA step; Keras, the reference, stays plain),
and runs its steps in two host calls. With `workers` > 1 it runs in that many processes on
loopback under MultiWorkerMirroredStrategy (one replica each), each process's input pipeline
reading only its own share of the files, as each host of a multi-host slice does; the chief
rebuilds every share for the reference, trains it and compares.
It fails, too, unless the optimizer made exactly one update per global step.

Both sides use plain SGD at the plan's learning rate: each step moves every weight by exactly
learning rate x gradient, so a gradient off by a factor shows in the weights by that factor. Adam
would hide it: its step divides the gradient by its own running magnitude, so a gradient twice
too large makes nearly the same step. `optimizer="run"` (`--optimizer run`) trains both sides
with the run's own optimizer instead (AdamW and its warmup-and-decay schedule over the `steps`):
what the run does, step for step, where the sharded tables' own Adam update is checked too.

The logical CPU devices must exist before TensorFlow starts. A process that already runs
TensorFlow runs the check in a fresh process (trainer_module/verify_process.py, its command line
and `run_in_subprocess`); a process that has the devices already (the tests: 8 logical CPUs)
calls `check` itself. `lockstep verify` and trainer.verify run it; the result is a Verification
(trainer_module/summary.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import build, input_pipeline, loop, model as model_lib, precision, scaling
from trainer_module import row_dropout, weight_average
from trainer_module import strategy as strategy_lib
from trainer_module.job import TrainJob
from trainer_module.summary import Verification

# Passes when the largest weight difference is at most this fraction of how far the reference
# weights moved. Measured on the penguins data, 3 SGD steps (relative = difference / movement):
#   right: the built-in MLP and loss, 2 replicas 1.6e-6 to 3.1e-6, 4 replicas 8e-7 to 1.5e-6,
#   8 replicas 8e-7; BatchNormalization(synchronized=True), 2 and 4 replicas 7e-7 and 4e-7.
#   (float32 sums in another order: a weight of about 0.5 one float32 step, 3e-8, apart.)
#   wrong: a loss averaged over the per-replica batch, 2 replicas 0.96, 4 replicas 2.8 (the
#   update is N times one device's); plain BatchNormalization, 2 and 4 replicas 0.068 and 0.040.
# 1e-4: 30x above the worst right figure, 400x below the mildest wrong one. The float32 step of
# the weights does not shrink with the learning rate: the relative figure of a right model grows
# as the learning rate falls (base_learning_rate 1e-4 on 8 replicas: 7.8e-5).
DEFAULT_TOLERANCE = 1e-4
# Under mixed precision both sides compute in 16 bits, the replicas on partial batches, so they
# differ by rounding. Measured on the penguins data, 3 SGD steps, 2 / 4 / 8 replicas (relative):
#   mixed_bfloat16: right 5.6e-3 / 4.5e-3 / 1.8e-2; a per-replica mean loss 0.96 / 2.8 / 6.0
#   mixed_float16:  right 1.6e-4 / 2.0e-4 / 2.2e-4; a per-replica mean loss 0.96 / 2.8 / 6.0
# bfloat16 keeps 8 bits of mantissa (2^-8 = 4e-3), float16 11. The tolerances sit 5x and 9x above
# the worst right figure, 10x and 480x below the mildest wrong one. In bfloat16 that is too wide for
# per-replica BatchNormalization statistics (0.04 to 0.07 in float32): verify those in float32.
TOLERANCES = {"float32": DEFAULT_TOLERANCE, "mixed_bfloat16": 1e-1, "mixed_float16": 2e-3}
# The relative figure has a floor: one float32 step of a weight. The built-in ensemble moves its
# weights 2.7e-4 in 3 steps at its rate (0.002), and one float32 step of a weight of about 0.2,
# 1.5e-8, is 5.5e-5 of that (seen in a fresh-clone CI: 2 replicas one step apart in one weight);
# two such steps would fail a right model at 1e-4. So a difference may also take up to one float32
# step of the weights per SGD step, and one more, beyond tolerance x movement: the float32 rounding
# of sums taken in another order, which each step can round the other way. Only where the weights
# moved at least ROUNDING_GUARD times that much: a wrong model differs by at least 0.04 of the
# movement (above), so there it still differs by 2 rounding allowances, beyond the tolerance.
ROUNDING_GUARD = 50


SGD, RUN = "sgd", "run"
OPTIMIZERS = (SGD, RUN)  # verify's plain SGD, or the run's own optimizer (build.optimizer)


def _optimizer(kind: str, cfg, plan: scaling.Plan) -> tf.keras.optimizers.Optimizer:
    if kind == RUN:
        return build.optimizer(cfg, build.schedule(plan))
    return precision.wrap_optimizer(tf.keras.optimizers.SGD(plan.learning_rate), cfg.precision)


class VerifyError(RuntimeError):
    """verify cannot run here (too few CPU devices, a failed subprocess); one line."""


def check(job: TrainJob, replicas: int = 2, steps: int = 3,
          tolerance: float | None = None, workers: int = 1,
          hardware: str = "", optimizer: str = SGD) -> Verification | None:
    """Trains `steps` global steps on `replicas` replicas with lockstep's loop and on one device
    with Keras `fit`, from the same weights on the same data; compares the weights.

    The model, loss and input are the run's: `build.model` (in trainer.precision) and
    `build.loss` over Transform's output, `input_pipeline.make_dataset_fn` on
    job.train_files at the plan's batch. workers == 1: `replicas` logical CPU devices
    (`strategy.configure_emulated_replicas` before TensorFlow starts; the command line does it).
    workers > 1: this process is one of them (TF_CONFIG set), replicas == workers; the chief
    returns the Verification, the others None. hardware: what a replica of the run being checked
    is ("tpu", "gpu", "cpu"; default "cpu"): the plan's default batch depends on it, and the
    check runs at the run's batch, on CPU replicas (XLA where XLA on CPU compiles the step:
    scaling.compiled). optimizer: SGD (verify's), or RUN (the run's AdamW and schedule)."""
    cfg = job.trainer
    tolerance = TOLERANCES[cfg.precision] if tolerance is None else tolerance
    strategy = _worker_strategy(workers) if workers > 1 else _replica_strategy(replicas)
    # The plan's batch and rate, for fixed steps: the split counted only where the batch needs it.
    fixed = dataclasses.replace(cfg, train_steps=steps)
    rows = build.train_rows(fixed, job.train_files)
    plan = scaling.make_plan(fixed, replicas, train_rows=rows, hardware=hardware)
    tf_transform_output = tft.TFTransformOutput(job.transform_dir)
    inputs = build.model_inputs(tf_transform_output, job.label, job.task, cfg)
    per_example_loss = build.loss(cfg, job.task, inputs.outputs)
    raw_spec, transform = _raw_and_transform(tf_transform_output, job)
    dataset_fn = input_pipeline.make_dataset_fn(
        job.train_files, raw_spec, job.label, job.task, plan.replica_step_batch, training=True,
        seed=cfg.seed, transform=transform)
    fed = replicas // workers  # the replicas one process's input pipeline feeds
    xla = scaling.compiled(cfg, "cpu")
    tf.keras.utils.set_random_seed(cfg.seed)
    with strategy.scope():
        model = build.model(inputs, strategy)
        kind, optimizer = optimizer, _optimizer(optimizer, cfg, plan)
        average = weight_average.made(model, cfg.weight_average)
    build.fill_statistics(model, job, raw_spec, transform)  # as the run counts them
    # Each table split over the replicas counted whole (trainer_module/sharded_embedding.py).
    initial = [w.numpy() for w in model_lib.logical_weights(model)]
    sharded = tuple(sorted(model_lib.sharded_parts(model)[1]))
    # The run's own input: each process's pipeline reads its own share of the files, as each host
    # of a multi-host run does (tf.distribute hands it its input context).
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: dataset_fn(ctx).take(steps * fed))
    step_loop = loop.SynchronousLoop(strategy, model, optimizer, per_example_loss,
                                     plan.global_batch, dataset, jit_compile=xla,
                                     accumulation_steps=plan.accumulation_steps,
                                     weight_average=average)
    first = max(steps // 2, 1)  # two host calls: the step loop resumes where it stopped
    step_loop.train(first)
    if steps > first:
        step_loop.train(steps - first)
    updates = int(optimizer.iterations.numpy())
    # Every worker takes part: a table split over worker processes is gathered whole.
    names, trained = [w.name for w in model_lib.logical_weights(model)], _averaged(model)
    averages = _averaged(model, average.swap) if average else []
    if not strategy_lib.is_chief(strategy):
        return None
    averaging = weight_average.AveragingCallback(cfg.weight_average) if average else None
    reference = _keras_on_one_device(
        inputs, per_example_loss, cfg.seed, initial,
        _optimizer(kind, cfg, plan), _global_batches(dataset_fn, workers, replicas, steps),
        plan.global_batch, averaging)
    difference, variable, moved, scale = _compare(*_beside(
        names, initial, trained, averages, reference, averaging))
    rounding = rounding_allowance(scale, steps, moved)
    return Verification(replicas, steps, plan.per_replica_batch, plan.global_batch,
                        plan.learning_rate, difference, variable, moved, tolerance,
                        passed=(within_tolerance(difference, moved, tolerance, rounding)
                                and updates == steps),
                        updates=updates, accumulation_steps=plan.accumulation_steps,
                        precision=cfg.precision, jit_compile=xla, workers=workers,
                        uncompiled=cfg.jit_compile and not xla,
                        rounding=rounding, sharded_tables=sharded,
                        optimizer=type(getattr(optimizer, "inner_optimizer", optimizer)).__name__)


def within_tolerance(difference: float, moved: float, tolerance: float, rounding: float) -> bool:
    """The weights moved, and the largest difference is at most `tolerance` of that movement
    plus the float32 rounding allowed (rounding_allowance)."""
    return moved > 0 and difference <= tolerance * moved + rounding


def rounding_allowance(scale: float, steps: int, moved: float) -> float:
    """What float32 rounding may add to a right model's difference: steps + 1 float32 steps of a
    weight of size `scale` (the largest in the variable that differs most); 0 where the weights
    moved less than ROUNDING_GUARD times that (there it could hide a wrong model)."""
    rounding = (steps + 1) * float(np.spacing(np.float32(scale)))
    return rounding if moved >= ROUNDING_GUARD * rounding else 0.0


def _beside(names: list, initial: list, trained: list, averages: list,
            reference: tf.keras.Model, averaging) -> tuple[list, list, list, list]:
    """(names, initial, lockstep's, the reference's) weights, in logical order; with `averaging`,
    the averaged models' after them (each split table gathered whole, as the reference holds
    it)."""
    wanted = [w.numpy() for w in model_lib.logical_weights(reference)]
    if averaging is None:
        return names, initial, trained, wanted
    return (names + [f"average of {n}" for n in names], initial + initial, trained + averages,
            wanted + _averaged(reference, averaging.swap))


def _averaged(model: tf.keras.Model, swap=lambda: None) -> list:
    """The model's logical weights (model.logical_weights), with the averages swapped in by
    `swap` (none by default)."""
    swap()
    try:
        return [w.numpy() for w in model_lib.logical_weights(model)]
    finally:
        swap()


def _keras_on_one_device(inputs, per_example_loss, seed: int, initial: list, optimizer,
                         batches: list, global_batch: int, averaging=None) -> tf.keras.Model:
    """Keras `fit` on one device, no strategy: the model from `initial` weights, the loss as
    Keras reduces it on one device (the mean over the global batch) with the model's
    regularization, one update per global batch of `batches` (per-replica batches in step
    order, _global_batches). averaging: a weight_average.AveragingCallback, which takes the
    weights' average over the steps."""
    tf.keras.utils.set_random_seed(seed)
    reference = build.model(inputs, tf.distribute.get_strategy(), whole_tables=True)
    model_lib.set_logical_weights(reference, initial)
    reference.compile(optimizer=optimizer, loss=_MeanOverBatch(per_example_loss),
                      jit_compile=False)
    row_dropout.attach(reference, optimizer)  # the step its dropout masks are keyed on
    x, y = _concatenate(batches)
    callbacks = [averaging.attach(reference)] if averaging else []
    reference.fit(x, y, batch_size=global_batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=callbacks)
    return reference


def one_device(job: TrainJob, replicas: int, make_optimizer, pipelines: int = 1,
               hardware: str = "") -> tf.keras.Model:
    """Keras on one device, trained as a run of the job on `replicas` replicas fed by
    `pipelines` input pipelines would train: from the job's initial weights, on the global
    batches that run reads (its own input: the fit rows, trainer.input_order), for its
    trainer.train_steps, with make_optimizer(plan)'s optimizer (the run's own: AdamW and its
    schedule): the trained weights, not their average (trainer.weight_average). The reference a
    whole run's checkpointed weights are held against (tests/test_gpu_machines.py: 4 worker
    processes of a Vertex AI job)."""
    cfg = job.trainer
    plan = scaling.make_plan(cfg, replicas, train_rows=build.train_rows(cfg, job.train_files),
                             hardware=hardware, hosts=pipelines)
    tf_transform_output = tft.TFTransformOutput(job.transform_dir)
    inputs = build.model_inputs(tf_transform_output, job.label, job.task, cfg)
    raw_spec, transform = _raw_and_transform(tf_transform_output, job)
    dataset_fn = build.train_input(job, plan, raw_spec, transform, start=0)  # the run's own
    tf.keras.utils.set_random_seed(cfg.seed)
    start = build.model(inputs, tf.distribute.get_strategy(), whole_tables=True)
    build.fill_statistics(start, job, raw_spec, transform)  # as the run counts them
    initial = [w.numpy() for w in model_lib.logical_weights(start)]
    return _keras_on_one_device(
        inputs, build.loss(cfg, job.task, inputs.outputs), cfg.seed, initial,
        make_optimizer(plan), _global_batches(dataset_fn, pipelines, replicas, plan.train_steps),
        plan.global_batch)


def _raw_and_transform(tf_transform_output, job: TrainJob):
    """(the raw examples' spec, Transform's layer): what the input and the counts of the target
    statistics read."""
    return (build.raw_spec(tf_transform_output, job.label),
            tf_transform_output.transform_features_layer())


def _worker_strategy(workers: int) -> tf.distribute.MultiWorkerMirroredStrategy:
    """This process's MultiWorkerMirroredStrategy (TF_CONFIG names the cluster and this task)."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if strategy.num_replicas_in_sync != workers:
        raise VerifyError(f"verify: {workers} workers asked for, but the cluster has "
                          f"{strategy.num_replicas_in_sync} replicas")
    return strategy


def _replica_strategy(replicas: int) -> tf.distribute.MirroredStrategy:
    """MirroredStrategy over the first `replicas` logical CPU devices."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if replicas < 2 or len(devices) < replicas:
        raise VerifyError(
            f"verify needs at least 2 replicas and as many logical CPU devices; asked for "
            f"{replicas}, TensorFlow has {len(devices)} (configure them before TensorFlow starts: "
            "run_in_subprocess does)")
    return tf.distribute.MirroredStrategy(
        devices[:replicas], cross_device_ops=tf.distribute.ReductionToOneDevice())


def _global_batches(dataset_fn, pipelines: int, replicas: int, steps: int) -> list:
    """The per-replica batches of the first `steps` global steps, in order (step 0's replicas,
    then step 1's, ...), as every pipeline feeds them: rebuilt here from the same dataset
    function and input contexts, for the one-device reference to train on. Each pipeline reads
    only its own share, and the shares together are the global batches."""
    fed = replicas // pipelines
    shares = [list(dataset_fn(tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=pipeline,
        num_replicas_in_sync=replicas)).take(steps * fed)) for pipeline in range(pipelines)]
    return [batch for step in range(steps) for share in shares
            for batch in share[step * fed:(step + 1) * fed]]


def _concatenate(batches: list):
    return tf.nest.map_structure(lambda *parts: np.concatenate([p.numpy() for p in parts]),
                                 *batches)


class _MeanOverBatch(tf.keras.losses.Loss):
    """The per-example loss as Keras reduces it on one device: the mean over the batch. The
    labels go in as the run gives them, [batch] (Keras `fit` makes them [batch, 1] for a
    [batch, outputs] model)."""

    def __init__(self, per_example_loss):
        super().__init__(reduction=tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE,
                         name="mean_per_example_loss")
        self.per_example_loss = per_example_loss

    def call(self, y_true, y_pred):
        return self.per_example_loss(tf.reshape(y_true, [-1]), y_pred)


def _compare(names: list[str], initial: list, replicas: list, reference: list):
    """(largest |replicas - reference|, the variable it is in, largest |reference - initial|,
    the largest |reference| weight of that variable), weight by weight in the models' order."""
    difference, variable, moved, scale = 0.0, "", 0.0, 0.0
    for name, start, got, want in zip(names, initial, replicas, reference):
        if start.size == 0:
            continue
        gap = float(np.max(np.abs(got.astype(np.float64) - want)))
        if gap > difference or not variable:
            difference, variable = gap, name
            scale = float(np.max(np.abs(want)))
        moved = max(moved, float(np.max(np.abs(want.astype(np.float64) - start))))
    return difference, variable, moved, scale
