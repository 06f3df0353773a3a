"""The whole embedding tables of the built-in model stacked by rows into one variable: one
lookup, one sparse gradient and one optimizer update for all of them, where a table a feature
made as many of each. A training step's cost on a table of many text and code columns is op
dispatch, not arithmetic (openintro's loans: 37 tables of 3 to 600 rows; their lookups, gradients
and AdamW updates were most of the step's ops).

The same model as one Keras Embedding per feature, weight for weight: feature i's rows are rows
offset_i .. offset_i + rows_i of the stack, drawn by the initializer its own Embedding would have
used (`table_initializer`), and Adam's (AdamW's) sparse update, its decay and the weight decay act
row by row, so the stack trains as the tables would (tests/test_table_stack.py). Its output is the
tables' rows in the features' order, with the rows of the tables that are not in it (split over
the replicas or the parameter servers: trainer_module/sharded_embedding.py) in their places.

Outside the layer each table is still a weight of its own name, "embed_<feature>/embeddings:0"
(`by_table`, a `TableSlice` each): the weights file a warm start reads (trainer_module/export.py),
and the weights an equivalence check compares, are the same however the tables are stacked or
split, and a table whose vocabulary grew starts afresh alone.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from trainer_module import layer_walk
from trainer_module.autograph_rules import plain

NAME = "categorical_tables"


def table_initializer(dim: int, seed: int, i: int):
    """The i-th categorical feature's table's initializer, stacked, split or alone: N(0, 1/dim)."""
    return tf.keras.initializers.RandomNormal(stddev=dim ** -0.5, seed=seed + 300 + i)


PREFIX = "embed_"  # a table's layer is "embed_<feature>", stacked, split or alone


def layer_name(feature: str) -> str:
    """The name of a feature's table's layer (its Keras Embedding, ShardedEmbedding or split
    Embedding)."""
    return PREFIX + feature


def feature_of(layer: str) -> str:
    """The feature a table's layer (`layer_name`) is named for."""
    return layer[len(PREFIX):]


def weight_name(feature: str) -> str:
    """A feature's table's name as a weight: its Keras Embedding's."""
    return f"{layer_name(feature)}/embeddings:0"


@tf.keras.utils.register_keras_serializable(package="lockstep")
class TableStack(tf.keras.layers.Layer):
    """{feature: ids [batch] (a stacked table's) or rows [batch, dim] (another's)} -> [batch,
    len(order) x dim], the features' rows in `order`.

    tables: [[feature, rows, i]] of the stacked tables, i the feature's place among all the
    categorical features (its initializer's seed, `table_initializer`)."""

    def __init__(self, tables, dim: int, order, seed: int = 0, **kwargs):
        kwargs["autocast"] = False  # ids stay integers; the rows are cast below, as Embedding's
        super().__init__(**kwargs)
        self.tables = [[str(f), int(rows), int(i)] for f, rows, i in tables]
        self.dim, self.order, self.seed = int(dim), list(order), int(seed)
        self.offsets = dict(zip([f for f, _, _ in self.tables],
                                np.cumsum([0] + [rows for _, rows, _ in self.tables])[:-1]))
        stacked = [f for f, _, _ in self.tables]
        self.given = [f for f in self.order if f not in self.offsets]
        # Where each feature's rows are in [stacked..., given...]: the features' order.
        self._places = [(stacked + self.given).index(f) for f in self.order]

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            "embeddings", [sum(rows for _, rows, _ in self.tables), self.dim],
            initializer=self._initial, experimental_autocast=False)
        super().build(input_shape)

    def _initial(self, shape, dtype=None, **kwargs):
        """Each table as its own Embedding would draw it, one under the other."""
        return tf.concat([table_initializer(self.dim, self.seed, i)([rows, self.dim], dtype)
                          for _, rows, i in self.tables], axis=0)

    @plain  # traced as written: trainer_module/autograph_rules.py
    def call(self, inputs):
        ids = tf.stack([tf.cast(inputs[f], tf.int64) for f, _, _ in self.tables], axis=1)
        offsets = tf.constant([self.offsets[f] for f, _, _ in self.tables], tf.int64)
        rows = tf.cast(tf.gather(self.embeddings, ids + offsets), self.compute_dtype)
        if self.given:
            others = tf.stack([tf.cast(inputs[f], self.compute_dtype) for f in self.given],
                              axis=1)
            rows = tf.gather(tf.concat([rows, others], axis=1), self._places, axis=1)
        return tf.reshape(rows, [-1, len(self.order) * self.dim])

    def get_config(self):
        return {**super().get_config(), "tables": self.tables, "dim": self.dim,
                "order": self.order, "seed": self.seed}


class TableSlice:
    """One feature's rows of a TableStack as a weight of its own (`by_table`): its Embedding's
    name and shape; `numpy` reads them, `assign` writes them."""

    def __init__(self, stack: TableStack, feature: str, rows: int):
        self.stack, self.feature, self.rows = stack, feature, rows
        self.offset = int(stack.offsets[feature])
        self.name = weight_name(feature)
        self.shape = tf.TensorShape([rows, stack.dim])
        self.dtype = stack.embeddings.dtype

    def numpy(self) -> np.ndarray:
        return self.stack.embeddings.numpy()[self.offset:self.offset + self.rows]

    def assign(self, value) -> None:
        whole = self.stack.embeddings.numpy()
        whole[self.offset:self.offset + self.rows] = np.asarray(value)
        self.stack.embeddings.assign(whole)


def stacks(model: tf.keras.Model) -> list[TableStack]:
    """The model's TableStacks, in its nested models too."""
    return layer_walk.of_kind(model, TableStack)


def by_table(model: tf.keras.Model, named: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """named ([(name, weight)] of the model's weights), each TableStack's variable in its tables'
    places as one TableSlice each, under the tables' own names."""
    split = {id(stack.embeddings): stack for stack in stacks(model)}
    out = []
    for name, weight in named:
        stack = split.get(id(weight))
        if stack is None:
            out.append((name, weight))
            continue
        out.extend((weight_name(f), TableSlice(stack, f, rows)) for f, rows, _ in stack.tables)
    return out
