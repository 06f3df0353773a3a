"""The weights' moving average (Polyak averaging: an exponential moving average of the weights
over the steps), which the model is scored, kept and exported with.

At the full learning rate the weights wander around the minimum by the noise of each step's
batch; their average over the last steps sits nearer it (Polyak and Juditsky 1992; the EMA of
Inception, Transformer and diffusion training). After every global step each average `a` of a
weight `w` takes a = m a + (1 - m) w, with m = min(trainer.weight_average, (1 + t) / (10 + t)) at
the optimizer's step t: the average follows the weights closely in the first steps (where one of
the initial weights would linger for hundreds of steps), as tf.train.ExponentialMovingAverage's
`num_updates` does. trainer.weight_average = 0 trains without it.

What is averaged: every weight the step trains, the model's trainable variables and the rows of
each table split over the replicas (trainer_module/sharded_embedding.py, past
trainer.shard_embeddings_over), so the model is the same whichever tables a topology splits.
Each block's average is one more copy of the block, on its replica's device, moved by its owner
(like AdamW's update of the block, a pass over its rows a step). Asynchronous training (parameter
servers) has no global step to average over and is not averaged.

The averages are variables made in the strategy's scope, like the weights (mirrored on every
replica; a split table's beside each block), updated in the strategy's cross-replica context
after each step (each replica's copy from its own copy of the weight, no transfer), and tracked in
the Controller's checkpoints: a run resumed on any number of replicas goes on with the same
averages. The equivalence check compares them with the same average taken over Keras `fit` on
one device (trainer_module/equivalence.py).
"""

from __future__ import annotations

import tensorflow as tf

from trainer_module import model as model_lib
from trainer_module.autograph_rules import plain

WARMUP = 10.0  # m_t = min(m, (1 + t) / (WARMUP + t))


def momentum_at(momentum: float, step) -> tf.Tensor:
    """The average's momentum after the optimizer's step `step` (1 after the first update)."""
    t = tf.cast(step, tf.float32)
    return tf.minimum(tf.constant(momentum, tf.float32), (1.0 + t) / (WARMUP + t))


def averaged_variables(model: tf.keras.Model) -> list[tf.Variable]:
    """The Keras variables averaged: the model's trainable ones (a table split over the replicas
    is not among them: its blocks are averaged apart)."""
    return list(model.trainable_variables)


def _split_tables(model: tf.keras.Model) -> list:
    """The model's tables split over the replicas (ShardedEmbedding), in a fixed order."""
    tables = model_lib.sharded_parts(model)[1]
    return [tables[key] for key in sorted(tables)]


class WeightAverage(tf.Module):
    """The averages of `averaged_variables(model)`, made in the strategy's scope."""

    def __init__(self, model: tf.keras.Model, momentum: float):
        super().__init__(name="weight_average")
        if not 0.0 < momentum < 1.0:
            raise ValueError(f"a weight average's momentum is above 0 and below 1, got {momentum}")
        self.momentum = momentum
        weights, tables = averaged_variables(model), _split_tables(model)
        # Not attributes of their own: the checkpoint would find the model's variables here
        # first and save them under this module's name (its keys "average/...", not "model/...").
        self._weights, self._tables = (lambda: weights), (lambda: tables)
        self.averages = [tf.Variable(v, trainable=False, name=f"average_{i}")
                         for i, v in enumerate(weights)]
        # Each split table's: blocks of the same rows on the same devices (its checkpoint keys
        # "average/tables/<i>/rows", slices of one table, as the table's own).
        self.tables = [table.kept_copy() for table in tables]
        self.names = [v.name for v in weights]
        exchange = tf.function(self._exchange, autograph=False)  # traced at its first call
        self._exchange_traced = lambda: exchange  # behind a lambda: not tracked, as above

    @plain  # traced as written (autograph_rules.py): AutoGraph failed on its lambdas each trace
    def update(self, strategy: tf.distribute.Strategy, step) -> None:
        """After a global step, in the cross-replica context (a step loop's tf.function): each
        average moves towards its weight, on each replica's device from its own copy."""
        m = momentum_at(self.momentum, step)

        def move(average, weight):
            return average.assign(m * average + (1.0 - m) * tf.cast(weight, average.dtype))

        for average, weight in zip(self.averages, self._weights()):
            strategy.extended.update(average, move, args=(weight,), group=False)
        for kept, table in zip(self.tables, self._tables()):
            for average, block in zip(kept.table, table.blocks.table):
                if block is not None:  # this process's blocks, each on its device
                    with tf.device(block.device):
                        average.assign(m * average + (1.0 - m) * block)

    def reset(self) -> None:
        """The averages := the weights (a warm start, or a cooldown from the kept weights)."""
        for average, weight in zip(self.averages, self._weights()):
            average.assign(weight.read_value())
        for kept, table in zip(self.tables, self._tables()):
            table.keep(kept)

    def swap(self) -> None:
        """The weights and their averages exchanged (twice: as they were), in one traced call:
        eagerly, each variable's three ops were a dispatch each, 13 ms a swap on the bundled
        penguins' 40 variables under a profile, and a score swaps twice."""
        self._exchange_traced()()

    def _exchange(self) -> None:
        for average, weight in zip(self.averages, self._weights()):
            kept = tf.identity(weight.read_value())
            weight.assign(average.read_value())
            average.assign(kept)
        for kept, table in zip(self.tables, self._tables()):
            for average, block in zip(kept.table, table.blocks.table):
                if block is not None:
                    with tf.device(block.device):
                        rows = tf.identity(block.read_value())
                        block.assign(average.read_value())
                        average.assign(rows)

    def assign_to_model(self) -> None:
        """The weights := their averages (the end of a run that kept no scored weights)."""
        for average, weight in zip(self.averages, self._weights()):
            weight.assign(average.read_value())
        for kept, table in zip(self.tables, self._tables()):
            table.restore(kept)


def made(model: tf.keras.Model, momentum: float, synchronous: bool = True):
    """A WeightAverage of the model's weights (in the strategy's scope), or None: momentum 0, or
    asynchronous training."""
    return WeightAverage(model, momentum) if momentum and synchronous else None


class AveragingCallback(tf.keras.callbacks.Callback):
    """The same average over Keras `fit` on one device (the equivalence check's reference), of
    every trainable variable: after each batch, from the optimizer's step. `attach(model)` once
    the model holds its initial weights."""

    def __init__(self, momentum: float):
        super().__init__()
        self.momentum = momentum
        self._weights, self._averages = [], []

    def attach(self, model: tf.keras.Model) -> "AveragingCallback":
        self._weights = averaged_variables(model)
        self._averages = [tf.Variable(v, trainable=False) for v in self._weights]
        return self

    def on_train_batch_end(self, batch, logs=None):
        m = momentum_at(self.momentum, self.model.optimizer.iterations)
        for average, weight in zip(self._averages, self._weights):
            average.assign(m * average + (1.0 - m) * weight)

    def swap(self) -> None:
        """The weights and their averages exchanged (twice: as they were)."""
        for average, weight in zip(self._averages, self._weights):
            kept = tf.identity(weight)
            weight.assign(average)
            average.assign(kept)
