"""Training until it stops improving: the validation rows carved from the train split
(trainer_module/input_pipeline.py, FIT and VALIDATION) score the model every `every` steps; the
best weights so far are kept, and training stops once `patience` scores in a row did not beat
the best, or as soon as the best is so near zero that no score could beat it by the least gain
that counts (trainer_module/least_gain.py). At the end the model holds the best weights. The
eval split is never used here: it stays the gate's unbiased measure.

The best weights, their step and score, and the count since are variables in the Controller's
checkpoints (`BestWeights`), saved with the model at the same step, so a run killed and resumed
picks the same checkpoint an uninterrupted run does. The score is the mean per-example loss of
the model's inference outputs (an ensemble's mean prediction) over every validation row, the
same number on every replica and worker, so all of them stop at the same step.

An action of the Controller (trainer_module/actions.py): it says stop by setting
logs[STOP_TRAINING]."""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from trainer_module import autograph_rules, model as model_lib, settings, sharded_embedding
from trainer_module.actions import STOP_TRAINING
from trainer_module.least_gain import better, unbeatable
from trainer_module.scaling import cooldown_steps
from trainer_module.summary import Stopping
from trainer_module.weight_average import momentum_at
VALIDATION_LOSS = "validation_loss"
# Scores over the planned steps, at most: one an epoch at the default budget (trainer.epochs),
# so a run that stops within it is scored once an epoch whatever the ceiling.
VALIDATIONS = round(settings.TrainerConfig.epochs)


# On a large table, a score at least every this many examples: `patience` scores without a new
# best then cost a fraction of an epoch, not `patience` epochs (nycflights13, 242,827 fit rows:
# scored once an epoch, its best came at epoch 1.0 and patience ran out at epoch 6.0; scored
# every 12,800 examples, at 650 steps of 256 and patience out at 900, for the same accuracy).
SCORE_EXAMPLES = 12_800


def every(total_steps: int, steps_per_epoch: int, global_batch: int = 0) -> int:
    """Steps between two scores: an epoch of the fit rows, or a 1/VALIDATIONS of the planned
    steps when that is longer (a long run on small data is not scored every few steps); but
    never more than SCORE_EXAMPLES examples of `global_batch` apart."""
    spaced = max(steps_per_epoch, math.ceil(total_steps / VALIDATIONS))
    if global_batch:
        spaced = min(spaced, math.ceil(SCORE_EXAMPLES / global_batch))
    return max(1, spaced)


# The validation rows a large table holds out, at most: the share shrinks to keep them. A score
# is a forward pass over every one, and a large table is scored every SCORE_EXAMPLES: at 20,000
# (until 2026-12-08) a score read 1.5 times the rows trained between two; at 10,000 it reads
# fewer, and the rows left go to fitting (what that changed: docs/performance.md).
VALIDATION_ROWS = 10_000


def validation_share(share: float, train_rows: int | None) -> float:
    """trainer.validation_share, lowered where the train split would hold out more than
    VALIDATION_ROWS rows by it."""
    if not train_rows or share * train_rows <= VALIDATION_ROWS:
        return share
    return VALIDATION_ROWS / train_rows


def capped(job, train_rows: int | None):
    """The TrainJob with its trainer.validation_share lowered by validation_share."""
    share = validation_share(job.trainer.validation_share, train_rows)
    if share == job.trainer.validation_share:
        return job
    return job.with_trainer(dataclasses.replace(job.trainer, validation_share=share))


class BestWeights(tf.Module):
    """The best weights so far, their step and score, and the scores since: variables, made in
    the strategy's scope, tracked by the Controller's checkpoints."""

    def __init__(self, model: tf.keras.Model, horizon=None):
        super().__init__(name="best_weights")
        # Where the learning rate's decay ends (warmup.Horizon; None: the plan's, fixed), which
        # the cooldown moves: tracked with the rest, in the same checkpoints.
        self.horizon = horizon
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
        # The step whose weights a cooldown started from (-1: none): a refit's flat part.
        self.cooled_best = tf.Variable(-1, trainable=False, dtype=tf.int64, name="cooled_best")
        # The validation rows scored (a job resumed at its stop scores none: its summary and its
        # refit still know them).
        self.rows = tf.Variable(0, trainable=False, dtype=tf.int64, name="validation_rows")
        # The step training stopped at (-1: not stopped), in the checkpoint saved there: a job
        # resumed from it (a retried task; a first fit trained again before its refit resumes)
        # trains no further.
        self.stopped_at = tf.Variable(-1, trainable=False, dtype=tf.int64, name="stopped_at")

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
    users_loss = autograph_rules.users(per_example_loss)

    @tf.function(autograph=False)  # traced as written (trainer_module/autograph_rules.py)
    def batch_loss(x, y):
        with autograph_rules.in_users_code():
            outputs = tf.cast(model(x, training=False), tf.float32)
        losses = users_loss(y, outputs)
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
    without one; at the end, put the best weights back (logs: best_step, validation_loss).

    Where `best` has a horizon (warmup.Horizon: the learning rate's decay reads it), patience that
    runs out before the planned decay begins starts a cooldown instead of stopping: the best
    weights are put back and the rate decays from there to zero over cooldown_steps (the
    `cooldown_share` of the best step's run and the cooldown), still scored and kept at its best,
    and training stops where it ends. (A cooldown from the weights patience ended on, past the
    best, gave MplsStops AUC 0.8982; from the best, 0.8994.) Its steps are in the checkpoint (the
    horizon's variables, with the best weights).

    With a `weight_average` (trainer_module/weight_average.py) the model is scored with the
    averaged weights, which are the ones kept (and so exported); a cooldown starts the average
    over from the kept weights."""

    before_checkpoint = True  # its state is in the checkpoint of the step it scored at

    def __init__(self, model: tf.keras.Model, best: BestWeights, score, every_steps: int,
                 patience: int, steps_per_epoch: int = 0, cooldown_share: float = 0.0,
                 chunk: int = 1, train_rows: int = 0, global_batch: int = 0,
                 weight_average=None):
        self.model, self.best, self.score = model, best, score
        self.weight_average = weight_average
        self.every, self.patience = max(every_steps, 1), patience
        self.steps_per_epoch = steps_per_epoch
        self.horizon, self.cooldown_share, self.chunk = best.horizon, cooldown_share, max(chunk, 1)
        self.train_rows, self.global_batch = train_rows, global_batch
        self.scores = 0  # scores taken in this process
        self.stopped_early = False
        self.settled = False  # stopped because no later score could be a new best

    def _improves(self, loss: float) -> bool:
        """Whether `loss` is kept over the best: by the least gain that counts (`better`), or,
        in the cooldown, by any gain (the decayed weights over the plateau's best)."""
        best = float(self.best.loss.numpy())
        if self._cooling():
            return math.isfinite(loss) and loss < best
        return better(loss, best)

    def _cooling(self) -> bool:
        return self.horizon is not None and self.horizon.cooling

    def _cool_down(self, step: int) -> bool:
        """Starts the cooldown at `step` (False where there is none to start: no horizon, no
        decay, or the planned decay already under way)."""
        if self.horizon is None:
            return False
        planned, decay = self.horizon.planned, int(self.horizon.decay.numpy())
        kept = max(int(self.best.step.numpy()), 0)  # where the decay starts from
        steps = min(cooldown_steps(kept, self.cooldown_share, self.chunk), planned - step)
        if steps <= 0 or step >= planned - decay:
            return False
        self.horizon.cool_down(step, steps)
        self.best.cooled_best.assign(kept)
        self.best.restore_into(self.model)  # the decay starts from the best weights
        if self.weight_average is not None:
            self.weight_average.reset()
        self.best.since.assign(0)
        return True

    def _score_and_keep(self, step: int) -> tuple[float, bool]:
        """The score at `step` (of the averaged weights, where there is an average), kept when it
        improves on the best."""
        if self.weight_average is not None:
            self.weight_average.swap()
        try:
            loss = self.score()
            self.best.scored.assign(step)
            self.best.rows.assign(getattr(self.score, "rows", 0))
            improved = self._improves(loss)
            if improved:
                self.best.keep(self.model, step, loss)
        finally:
            if self.weight_average is not None:
                self.weight_average.swap()
        return loss, improved

    def __call__(self, step: int, logs: dict) -> None:
        if self._cooling() and step >= int(self.horizon.end.numpy()):
            self._stop(step, logs)  # the cooldown's end: end() scores this step
            return
        if step // self.every <= int(self.best.scored.numpy()) // self.every:
            return
        loss, improved = self._score_and_keep(step)
        self.scores += 1
        logs[VALIDATION_LOSS] = loss
        if not improved:
            self.best.since.assign_add(1)
        self._settle()
        if self.settled or (not self._cooling() and int(self.best.since.numpy()) >= self.patience
                            and not self._cool_down(step)):
            self._stop(step, logs)

    def _stop(self, step: int, logs: dict) -> None:
        logs[STOP_TRAINING] = True
        self.stopped_early = True
        self.best.stopped_at.assign(step)

    def stopped(self, step: int) -> bool:
        """Whether training had stopped at `step`, the step the Controller resumes at: nothing
        is left to train (the Controller asks before its first chunk)."""
        if int(self.best.stopped_at.numpy()) != step:
            return False
        self.stopped_early = True
        self._settle()
        return True

    def _settle(self) -> None:
        """Sets `settled`: whether the best is so near zero that the least gain that counts
        (MIN_DELTA) cannot beat it, so the scores patience would wait for could only keep these
        weights (loans: 620 steps)."""
        self.settled = unbeatable(float(self.best.loss.numpy()))

    def end(self, step: int, logs: dict) -> None:
        if step > int(self.best.scored.numpy()):  # the last step, scored too
            self._score_and_keep(step)
        if int(self.best.step.numpy()) < 0:  # nothing scored (no validation rows): as trained
            if self.weight_average is not None:
                self.weight_average.assign_to_model()
            return
        self.best.restore_into(self.model)
        logs["best_step"] = int(self.best.step.numpy())
        logs[VALIDATION_LOSS] = float(self.best.loss.numpy())

    def _momentum_kept(self) -> float:
        """The weights' average's momentum at the kept step, as it was in effect there: below
        trainer.weight_average in a short run (`momentum_at`: 0.9775 at step 390,
        an average over about 44 steps, not 100); 0.0 without an average."""
        if self.weight_average is None:
            return 0.0
        step = max(int(self.best.step.numpy()), 0)
        return float(momentum_at(self.weight_average.momentum, step).numpy())

    def summary(self, step: int, planned: int | None = None) -> Stopping:
        """What happened, for the TrainingSummary: where training stopped, which step was kept.
        Patience that ran out at the last planned step (`planned`) is no early stop."""
        rows = getattr(self.score, "rows", 0) or int(self.best.rows.numpy())
        return Stopping(stopped_at=step, best_step=int(self.best.step.numpy()),
                        validation_loss=float(self.best.loss.numpy()),
                        validation_rows=rows,
                        steps_per_epoch=self.steps_per_epoch, every=self.every,
                        stopped_early=self.stopped_early and (planned is None or step < planned),
                        settled=self.settled,
                        cooled_from=(int(self.horizon.end.numpy() - self.horizon.decay.numpy())
                                     if self._cooling() else 0),
                        fit_rows=max(self.train_rows - rows, 0),
                        global_batch=self.global_batch,
                        averaged=self._momentum_kept(),
                        cooled_best=(int(self.best.cooled_best.numpy()) if self._cooling()
                                     else -1),
                        cooled_over=int(self.horizon.decay.numpy()) if self._cooling() else 0)
