"""Training until it stops improving: the validation rows carved from the train split
(trainer_module/input_pipeline.py, FIT and VALIDATION) score the model every `every` steps; the
best weights so far are kept, and training stops once `patience` scores in a row did not beat
the best, or as soon as the best is so near zero that no score could beat it by the least gain
that counts (`better`). At the end the model holds the best weights. The eval split is never
used here: it stays the gate's unbiased measure.

The best weights, their step and score, and the count since are variables in the Controller's
checkpoints (`BestWeights`), saved with the model at the same step, so a run killed and resumed
picks the same checkpoint an uninterrupted run does. The score is the mean per-example loss of
the model's inference outputs (an ensemble's mean prediction) over every validation row, the
same number on every replica and worker, so all of them stop at the same step.

An action of the Controller (trainer_module/actions.py): it says stop by setting
logs[STOP_TRAINING]."""

from __future__ import annotations

import math

import tensorflow as tf

from trainer_module import model as model_lib, sharded_embedding
from trainer_module.actions import STOP_TRAINING
from trainer_module.summary import Stopping
VALIDATION_LOSS = "validation_loss"
VALIDATIONS = 20  # scores over the planned steps, at most


# A score is a new best when it is lower by more than this share of the best (or MIN_DELTA, near
# zero): a model that already separates the rows (a loss of 1e-4) does not train on for gains
# of a millionth.
RELATIVE_DELTA, MIN_DELTA = 1e-3, 1e-4


def better(loss: float, best: float) -> bool:
    """Whether `loss` is a new best against `best` (inf before the first score)."""
    if not math.isfinite(loss):
        return False
    return not math.isfinite(best) or loss < best - max(RELATIVE_DELTA * best, MIN_DELTA)


def every(total_steps: int, steps_per_epoch: int) -> int:
    """Steps between two scores: an epoch of the fit rows, or a 1/VALIDATIONS of the planned
    steps when that is longer (a long run on small data is not scored every few steps)."""
    return max(1, steps_per_epoch, math.ceil(total_steps / VALIDATIONS))


class BestWeights(tf.Module):
    """The best weights so far, their step and score, and the scores since: variables, made in
    the strategy's scope, tracked by the Controller's checkpoints."""

    def __init__(self, model: tf.keras.Model):
        super().__init__(name="best_weights")
        # A table split over the parameter servers is kept split as it is, its copy saved whole
        # in the checkpoint as the table is: a job resumes with it on another number of servers.
        self.weights = [sharded_embedding.server_copy(v, f"best_{i}")
                        if sharded_embedding.is_server_split(v) else
                        tf.Variable(v, trainable=False, name=f"best_{i}")
                        for i, (_, v) in enumerate(sharded_embedding.whole_variables(model))]
        # A table split over the replicas (not among the Keras weights): its blocks, each kept
        # on its replica's device.
        self.tables = [table.kept_copy() for table in _tables(model)]
        self.loss = tf.Variable(math.inf, trainable=False, dtype=tf.float64, name="best_loss")
        self.step = tf.Variable(-1, trainable=False, dtype=tf.int64, name="best_step")
        self.since = tf.Variable(0, trainable=False, dtype=tf.int64, name="since_best")
        self.scored = tf.Variable(-1, trainable=False, dtype=tf.int64, name="last_scored")

    def keep(self, model: tf.keras.Model, step: int, loss: float) -> None:
        for kept, (_, current) in zip(self.weights, sharded_embedding.whole_variables(model)):
            sharded_embedding.assign_parts(kept, current)
        for kept, table in zip(self.tables, _tables(model)):
            table.keep(kept)
        self.loss.assign(loss)
        self.step.assign(step)
        self.since.assign(0)

    def restore_into(self, model: tf.keras.Model) -> None:
        for (_, current), kept in zip(sharded_embedding.whole_variables(model), self.weights):
            sharded_embedding.assign_parts(current, kept)
        for kept, table in zip(self.tables, _tables(model)):
            table.restore(kept)


def _tables(model: tf.keras.Model) -> list:
    """The model's tables split over the replicas, in a fixed order."""
    tables = model_lib.sharded_parts(model)[1]
    return [tables[key] for key in sorted(tables)]


def validation_loss(model: tf.keras.Model, per_example_loss, dataset: tf.data.Dataset):
    """A function () -> the mean per-example loss of model(x, training=False) over `dataset`.

    The dataset is read once, at the first score, and its batches kept in memory: an iterator
    made at every score ran tf.data's graph rewrites over the transform graph each time (0.2 s a
    score on a 53-column table, 14 scores a run)."""
    kept: list = []

    @tf.function
    def batch_loss(x, y):
        outputs = tf.cast(model(x, training=False), tf.float32)
        losses = per_example_loss(y, outputs)
        return tf.reduce_sum(tf.cast(losses, tf.float64)), tf.cast(tf.size(losses), tf.float64)

    def mean() -> float:
        total, count = 0.0, 0.0
        if not kept:
            kept.extend(dataset)
        for x, y in kept:
            batch_total, batch_count = batch_loss(x, y)
            total += float(batch_total)
            count += float(batch_count)
        mean.rows = int(count)
        return total / count if count else math.nan

    mean.rows = 0
    return mean


def on_copy(model: tf.keras.Model, copy: tf.keras.Model, score):
    """`score` (validation_loss over `copy`) with model's weights copied into copy first: one
    read of each variable a score, wherever the variables live (parameter servers)."""

    def mean() -> float:
        copy.set_weights(sharded_embedding.whole_weights(model))
        value = score()
        mean.rows = score.rows
        return value

    mean.rows = 0
    return mean


class EarlyStopping:
    """The action: every `every` steps, score; keep the best; stop after `patience` scores
    without one; at the end, put the best weights back (logs: best_step, validation_loss)."""

    before_checkpoint = True  # its state is in the checkpoint of the step it scored at

    def __init__(self, model: tf.keras.Model, best: BestWeights, score, every_steps: int,
                 patience: int, steps_per_epoch: int = 0):
        self.model, self.best, self.score = model, best, score
        self.every, self.patience = max(every_steps, 1), patience
        self.steps_per_epoch = steps_per_epoch
        self.scores = 0  # scores taken in this process
        self.stopped_early = False
        self.settled = False  # stopped because no later score could be a new best

    def __call__(self, step: int, logs: dict) -> None:
        if step // self.every <= int(self.best.scored.numpy()) // self.every:
            return
        loss = self.score()
        self.scores += 1
        self.best.scored.assign(step)
        logs[VALIDATION_LOSS] = loss
        if better(loss, float(self.best.loss.numpy())):
            self.best.keep(self.model, step, loss)
        else:
            self.best.since.assign_add(1)
        # A best this close to zero cannot be beaten by the least gain that counts (MIN_DELTA):
        # the scores patience would wait for could only keep these weights (loans: 620 steps).
        self.settled = not better(0.0, float(self.best.loss.numpy()))
        if self.settled or int(self.best.since.numpy()) >= self.patience:
            logs[STOP_TRAINING] = True
            self.stopped_early = True

    def end(self, step: int, logs: dict) -> None:
        if step > int(self.best.scored.numpy()):  # the last step, scored too
            loss = self.score()
            self.best.scored.assign(step)
            if better(loss, float(self.best.loss.numpy())):
                self.best.keep(self.model, step, loss)
        if int(self.best.step.numpy()) < 0:  # nothing scored (no validation rows): as trained
            return
        self.best.restore_into(self.model)
        logs["best_step"] = int(self.best.step.numpy())
        logs[VALIDATION_LOSS] = float(self.best.loss.numpy())

    def summary(self, step: int, planned: int | None = None) -> Stopping:
        """What happened, for the TrainingSummary: where training stopped, which step was kept.
        Patience that ran out at the last planned step (`planned`) is no early stop."""
        return Stopping(stopped_at=step, best_step=int(self.best.step.numpy()),
                        validation_loss=float(self.best.loss.numpy()),
                        validation_rows=getattr(self.score, "rows", 0),
                        steps_per_epoch=self.steps_per_epoch, every=self.every,
                        stopped_early=self.stopped_early and (planned is None or step < planned),
                        settled=self.settled)
