"""Target statistics: what the label was, on the fit rows, where a text or code column had each
value. A panel's person id seen three times, a rater seen twenty: the model learns the value's
embedding from those few rows, one gradient step at a time, shrunk by weight decay at every
step; CatBoost gives the same value a number, the share of its rows of each class (or their mean
label) so far, and that is what its ordered target statistics are for.

Here each value of a stacked table (text and codes, trainer_module/table_stack.py) gets, for
each of FOLDS folds of the fit rows, the sums of its rows' labels (a class's one-hot for more
than two classes, the positive class's 0/1 for two, the standardized value for a regression)
and their count. A row's feature is its value's smoothed mean,
(sum + prior x SMOOTHING) / (count + SMOOTHING), centred on the prior and scaled by its
spread:

- in training, from the other folds only: a row's own label is never in its own feature (with
  it, a value seen three times would tell the model a third of the answer it is trained on:
  target leakage; a row's fold is a hash of all its inputs, `TargetStatistics.fold`, so a row
  repeated is in one fold, and a row is in the same fold on any replica and in any epoch);
- in inference (validation, evaluation, serving), from every fold: the rows scored are not
  among those counted.

The statistics are the layer's weights, not trained (the step's gradient is over the trainable
variables only): `fill` sets them from one pass over the fit rows before the first step, in
every process alike, and the served model carries them. Where the training input keeps the fit
rows in memory (one pipeline), that pass is its first parse of them, which training then reads
(trainer_module/input_pipeline.py, `once`): the rows are parsed once for both. A table split
over the replicas or the parameter servers (trainer_module/sharded_embedding.py) has none: its
values are too many to count on every replica.

A table whose seen values average fewer than trainer.embedding_min_rows fit rows each (a panel's
person ids, seen two to five times; a rater seen twenty) is its statistics alone: the layer takes
the tables' embedding rows in and gives that table's back as zeros (`kept`, which `fill` sets from
the counts: the same on any layout). An embedding learned from two rows a value costs more than it
gives once the value's statistic is there. Measured: docs/training.md, "Target statistics".
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from trainer_module import layer_walk, settings
from trainer_module.autograph_rules import plain

NAME = "target_statistics"
FOLDS = 5
SMOOTHING = 1.0  # the prior's weight, in rows (0.3, 1 and 3 the same on COUNT's rwm5yr)
MAX_CLASSES = 16  # past this many classes, one statistic a class is too wide: none
_PRIME = 65521  # the fold's hash: a sum of each input's bits mod a prime, in int32
COUNTED_BYTES = 64 << 20  # a table's counts past this: none (a table of millions of ids)
FILL_BATCH = 4096  # the fit rows' batch in `fill`'s pass
ROWS = "__embedding_rows"  # the input of the tables' rows, which the layer keeps or leaves out


def widths(task: str, outputs: int) -> int:
    """The statistics a value has: 1 for a regression (its mean label) and for two classes (the
    share of the second), one a class for more, 0 (none) past MAX_CLASSES classes."""
    if task == settings.REGRESSION or outputs == 2:
        return 1
    return outputs if outputs <= MAX_CLASSES else 0


def counted_tables(categorical: dict[str, int], task: str, outputs: int,
                   cfg: settings.TrainerConfig) -> list[list]:
    """[[feature, rows]] of the built-in model's tables whose values get target statistics:
    those whose counts take at most COUNTED_BYTES (not a model-parallel table of millions of
    ids), whatever their layout (stacked, split over the replicas or the servers: the same
    model on any topology); none where the task has too many classes or
    trainer.target_statistics is off."""
    width = widths(task, outputs)
    if not cfg.target_statistics or not width:
        return []
    return [[key, rows] for key, rows in sorted(categorical.items())
            if rows * FOLDS * (width + 1) * 4 <= COUNTED_BYTES]


def ids_name(feature: str) -> str:
    """The input that brings a split table's ids to the model's CORE (trainer_module/model.py),
    whose input of the feature's own name is the rows the step looked up."""
    return feature + "__ids"


def ids_input(inputs: dict, feature: str):
    """A split table's ids as an input of the model's CORE, added to its `inputs`."""
    name = ids_name(feature)
    inputs[name] = tf.keras.Input(shape=(), name=name, dtype=tf.int64)
    return inputs[name]


def with_ids(core: tf.keras.Model, x: dict, ids: dict) -> dict:
    """CORE's inputs `x` (a split table's rows under its feature's name) with the tables' `ids`
    that its target statistics count (`ids_name`)."""
    return {**x, **{ids_name(key): value for key, value in ids.items()
                    if ids_name(key) in core.input}}


@tf.keras.utils.register_keras_serializable(package="lockstep")
class TargetStatistics(tf.keras.layers.Layer):
    """{feature: ids [batch] of the `tables`, and the float inputs `hashed`} -> [batch,
    len(tables) x width]: each table's value's target statistics (the module's docstring), from
    the other folds in training, from all of them in inference.

    tables: [[feature, rows]]; hashed: the float inputs (besides the tables' ids) a row's fold
    is a hash of; width: the statistics a value has (`widths`).

    order, dim: with them, the input has ROWS too, the categorical features' embedding rows
    [batch, len(order) x dim] in `order`, and the output is [those rows, the statistics], where
    a counted table whose seen values average fewer than `min_rows` fit rows each (a panel's
    person ids, seen two to five times) has its rows left out (zeros): it is its statistics
    alone (`kept`, set by `fill`)."""

    def __init__(self, tables, hashed, width: int, folds: int = FOLDS, order=None, dim: int = 0,
                 min_rows: float = 0.0, **kwargs):
        kwargs["autocast"] = False  # ids stay integers
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.tables = [[str(f), int(rows)] for f, rows in tables]
        self.hashed, self.width, self.folds = list(hashed), int(width), int(folds)
        self.offsets = np.cumsum([0] + [rows for _, rows in self.tables])[:-1].tolist()
        self.order, self.dim, self.min_rows = list(order or []), int(dim), float(min_rows)

    def build(self, input_shape):
        rows = sum(r for _, r in self.tables)
        # [rows, folds, width + 1]: each value's label sums and (last) row count in each fold.
        self.counts = self.add_weight("counts", [rows, self.folds, self.width + 1],
                                      initializer="zeros", trainable=False)
        # [2, width]: the fit rows' mean statistic (the prior) and its spread.
        self.prior = self.add_weight(  # until `fill`: prior 0, spread 1
            "prior", [2, self.width], trainable=False,
            initializer=lambda shape, dtype=None: tf.concat(
                [tf.zeros([1, shape[1]], dtype), tf.ones([1, shape[1]], dtype)], axis=0))
        # [tables]: 1 where a table's rows are kept, 0 where it is its statistics alone.
        self.kept = self.add_weight("kept", [len(self.tables)], initializer="ones",
                                    trainable=False)
        # Each hashed input's floats a row (the model's inputs' static shapes: a batch read
        # outside the model may not have them).
        self.hashed_widths = [int(np.prod(input_shape[k][1:])) for k in self.hashed]
        super().build(input_shape)

    def ids(self, inputs) -> tf.Tensor:
        """[batch, tables]: each table's value's row among the counts."""
        return (tf.stack([tf.cast(inputs[f], tf.int32) for f, _ in self.tables], axis=1)
                + tf.constant(self.offsets, tf.int32))

    def fold(self, inputs) -> tf.Tensor:
        """[batch] int32: a row's fold, a hash of its ids and its floats' bits (the same row, the
        same fold, wherever and whenever it is read)."""
        parts = [tf.stack([tf.cast(inputs[f], tf.int32) for f, _ in self.tables], axis=1)]
        parts += [tf.reshape(tf.bitcast(tf.cast(inputs[k], tf.float32), tf.int32), [-1, width])
                  for k, width in zip(self.hashed, self.hashed_widths)]
        bits = tf.concat(parts, axis=1)
        weights = np.random.RandomState(7).randint(
            1, 1 << 15, size=len(self.tables) + sum(self.hashed_widths))
        mixed = tf.math.floormod(tf.math.floormod(bits, _PRIME) * weights.astype(np.int32),
                                 _PRIME)
        return tf.math.floormod(tf.math.floormod(tf.reduce_sum(mixed, axis=1), _PRIME),
                                self.folds)

    def keep(self, rows: tf.Tensor) -> tf.Tensor:
        """The embedding rows [batch, len(order) x dim], each counted table's times its `kept`."""
        counted = [f for f, _ in self.tables]
        weights = tf.concat([self.kept[counted.index(f)][None] if f in counted else [1.0]
                             for f in self.order], axis=0)
        return rows * tf.cast(tf.repeat(weights, self.dim), rows.dtype)

    @plain  # training is a Python bool here (Keras traces each value apart)
    def call(self, inputs, training=None):
        counted = tf.gather(self.counts, self.ids(inputs))  # [batch, tables, folds, width + 1]
        # In training, less the row's own fold: gathered, not an einsum with the fold's one-hot
        # (the same numbers to the bit; at nycflights13's shapes, batch 256 and 10 tables, 31 us
        # against 115 a step in a loop of their own).
        counted = tf.reduce_sum(counted, axis=2) - (
            tf.gather(counted, self.fold(inputs), axis=2, batch_dims=1) if training else 0.0)
        prior, spread = self.prior[0], self.prior[1]
        mean = ((counted[:, :, :self.width] + prior * SMOOTHING)
                / (counted[:, :, self.width:] + SMOOTHING))
        statistics = tf.reshape((mean - prior) / spread, [-1, len(self.tables) * self.width])
        if not self.order:
            return statistics
        return [self.keep(inputs[ROWS]), statistics]

    def get_config(self):
        return {**super().get_config(), "tables": self.tables, "hashed": self.hashed,
                "width": self.width, "folds": self.folds, "order": self.order,
                "dim": self.dim, "min_rows": self.min_rows}


def layers(model: tf.keras.Model) -> list[TargetStatistics]:
    """The model's TargetStatistics layers, in its nested models too."""
    return layer_walk.of_kind(model, TargetStatistics)


def fill(model: tf.keras.Model, dataset, task: str) -> int:
    """Counts the fit rows' labels into the model's target statistics. dataset: (features,
    label) batches of every fit row once (read only where the model has the layer), the label
    a class index or a regression's standardized value. Returns the rows counted (0: none)."""
    rows = 0
    for layer in layers(model):
        count = _counter(layer, task)
        shape = layer.counts.shape
        total = tf.zeros([shape[0] * shape[1], shape[2]], tf.float64)
        squares = tf.zeros([layer.width], tf.float64)
        for x, y in dataset:
            counted, squared = count(x, y)
            total += counted
            squares += squared
        total = tf.reshape(total, shape)
        # Every row is counted once a table: the first table's counts are the rows'.
        first = tf.reduce_sum(total[:layer.tables[0][1]], axis=[0, 1])
        rows = int(first[-1].numpy())
        prior = first[:-1] / max(rows, 1)
        variance = squares / max(rows, 1) - prior * prior
        spread = tf.sqrt(tf.where(variance > 1e-12, variance, 1.0))
        layer.counts.assign(tf.cast(total, tf.float32))
        layer.prior.assign(tf.cast(tf.stack([prior, spread]), tf.float32))
        layer.kept.assign(kept(layer, tf.reduce_sum(total[..., -1], axis=1).numpy()))
    return rows


def kept(layer: TargetStatistics, seen: np.ndarray) -> np.ndarray:
    """[tables] 1.0 where a table's seen values average at least the layer's min_rows fit rows
    (seen: each value's), else 0.0 (`TargetStatistics`)."""
    means = [seen[start:start + rows].sum() / max(np.count_nonzero(seen[start:start + rows]), 1)
             for (_, rows), start in zip(layer.tables, layer.offsets)]
    return (np.array(means) >= layer.min_rows).astype(np.float32)


def _counter(layer: TargetStatistics, task: str):
    """A traced function (features, label) -> ([value rows x folds, width + 1] the batch's label
    sums and rows by value and fold, [width] its statistics' squares), in float64."""
    segments = layer.counts.shape[0] * layer.folds

    @tf.function(reduce_retracing=True)
    @plain
    def count(x, y):
        if task == settings.REGRESSION:
            encoded = tf.reshape(tf.cast(y, tf.float64), [-1, 1])
        elif layer.width == 1:
            encoded = tf.cast(tf.reshape(y, [-1]) == 1, tf.float64)[:, None]
        else:
            encoded = tf.one_hot(tf.cast(tf.reshape(y, [-1]), tf.int32), layer.width,
                                 dtype=tf.float64)
        counted = tf.concat([encoded, tf.ones_like(encoded[:, :1])], axis=1)  # [batch, w + 1]
        place = layer.ids(x) * layer.folds + layer.fold(x)[:, None]  # [batch, tables]
        tables = len(layer.tables)
        summed = tf.math.unsorted_segment_sum(
            tf.repeat(counted, tables, axis=0), tf.reshape(place, [-1]), segments)
        return summed, tf.reduce_sum(encoded * encoded, axis=0)

    return count
