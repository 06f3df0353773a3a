"""An embedding table split by rows over the replicas: model parallelism for the one part of a
tabular model that outgrows a device (a column of user or item ids, hashed ad features).

Each of N replicas holds one contiguous block of about rows / N rows, and Adam's two slots for
them, on its own device: a 10 M x 16 table with its slots costs 1.9 GB over all the replicas,
not 1.9 GB on each. Under MirroredStrategy one process holds every block; under
MultiWorkerMirroredStrategy each worker process its own replicas' blocks. In a training step
(trainer_module/loop.py), as TPUEmbedding does it on a TPU:

1. `exchange`: each replica's ids are gathered from every replica (all-gather), each replica
   looks up the rows it owns (zeros for the others) and the partial rows are summed (all-reduce):
   every replica then has its own examples' rows, exactly (a row plus zeros). The model's
   dense part takes these rows as its input, outside any collective.
2. The gradient of the loss with respect to those rows is gathered from every replica
   (all-gather: each example's gradient is on one replica, so nothing is added), each replica
   adds up the gradients of the rows it owns (per row, in float64) and
3. `apply_gradients`: updates its rows by Adam's (AdamW's) sparse rule, as Keras does on one
   device, at the step and learning rate of the optimizer's update just made: the decay (the
   tables' own, trainer_module/table_decay.py), then m and v decayed and the rows' gradients added
   in, then the step. The update is applied once, by the owner; it is never summed over the
   replicas again.

Summed over the replicas the forward pass is one device's, and each row's gradient is one
device's sum over the global batch: the weights after any number of steps are those of one
device with the whole table (tests/test_sharded_embedding.py, <= 1e-6).

Outside a training step (evaluation, early stopping, the served model) the layer looks its ids up
in the blocks as one table (TensorFlow's "div" split of ids over blocks). A checkpoint holds each
block as a slice of one logical [rows, dim] tensor (and slices of its slots): a checkpoint written
on N replicas restores on M. The exported model holds one whole table (`model.unsharded`,
trainer_module/model.py). Across worker processes a checkpoint holds each table whole, gathered
from every worker (only the chief's file is kept), each worker restoring its own blocks from it;
the whole table (export, verify, an evaluation's lookups) is gathered too.

No collective runs inside the gradient tape, the accumulation loop or an XLA-compiled step: the
exchange happens once per global step for all of a replica's micro-batches.

Under ParameterServerStrategy (asynchronous: no replicas in step) a table is split over the
parameter servers instead, by the strategy's own variable partitioner (`SERVER_SPLIT`): the
Embedding's variable is a ShardedVariable of contiguous blocks ("div", as above), each on a
server; a worker's lookup reads only the rows it needs, its sparse update reaches only theirs. Its
checkpoint holds the whole logical table too.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import tensorflow as tf

from trainer_module import strategy as strategy_lib, table_decay, table_plan, table_stack
from trainer_module import tf_internals
from trainer_module.autograph_rules import plain

class ServerSplit(threading.local):
    """ParameterServerStrategy's `variable_partitioner` (trainer_module/parameter_server.py):
    a variable made inside `splitting(blocks)` (the built-in model's table there) is split by
    rows into `blocks` ShardedVariable parts, one on each of that many parameter servers; every
    other variable (the dense layers, Adam's slots, which follow their table's parts) is whole."""

    blocks = 1

    def __call__(self, shape, dtype) -> list[int]:
        del dtype
        return [min(self.blocks, int(shape[0]))] + [1] * (len(shape) - 1)

    @contextlib.contextmanager
    def splitting(self, blocks: int):
        before, self.blocks = self.blocks, max(int(blocks), 1)
        try:
            yield
        finally:
            self.blocks = before


SERVER_SPLIT = ServerSplit()


def server_split(model: tf.keras.Model) -> dict:
    """{layer name: its ShardedVariable} for each Embedding whose table is split over the
    parameter servers (`SERVER_SPLIT`)."""
    split = tf_internals.sharded_variable_type()
    return {layer.name: layer.embeddings for layer in model.layers
            if isinstance(getattr(layer, "embeddings", None), split)}


def whole_variables(model: tf.keras.Model) -> list[tuple[str, object]]:
    """[(name, variable)] of model.weights, each table split over the parameter servers once,
    where its parts were, as its ShardedVariable under the whole table's name
    ("embed_user/embeddings:0"): the weights of the same model built without a strategy."""
    split = {id(part): (f"{layer}/embeddings:0", table)
             for layer, table in server_split(model).items() for part in table.variables}
    named, seen = [], set()
    for weight in model.weights:
        name, variable = split.get(id(weight), (weight.name, weight))
        if id(variable) not in seen:
            seen.add(id(variable))
            named.append((name, variable))
    return named


def named_weights(model: tf.keras.Model) -> list[tuple[str, object]]:
    """[(name, weight)] as one device's model of one Embedding per feature has them, whatever
    the layout: a table split over the parameter servers whole (`whole_variables`), each
    stacked table a weight of its own (trainer_module/table_stack.py, `by_table`). Each
    weight's value: `weight_value`."""
    return table_stack.by_table(model, whole_variables(model))


def is_server_split(variable) -> bool:
    """Whether `variable` is a table split over the parameter servers (a ShardedVariable)."""
    return isinstance(variable, tf_internals.sharded_variable_type())


def server_copy(table, name: str):
    """A zero variable split over the parameter servers as `table` is (in the strategy's scope),
    saved whole as the table is: early stopping's copy restores on any number of servers."""
    shape, dtype = table.shape, table.dtype

    def zeros(partition_shape=None, partition_offset=None):
        del partition_offset
        return tf.zeros(partition_shape or shape, dtype)

    with SERVER_SPLIT.splitting(len(table.variables)):
        copy = tf.Variable(zeros, shape=shape, dtype=dtype, trainable=False, name=name)
    if [part.shape for part in copy.variables] != [part.shape for part in table.variables]:
        raise ValueError(f"{name}: not split as {table.name} is")
    return copy


def assign_parts(target, source) -> None:
    """target = source: split over the parameter servers alike, part by part; else whole."""
    if is_server_split(target):
        for into, part in zip(target.variables, source.variables):
            into.assign(part)
    else:
        target.assign(source)


def weight_value(weight) -> np.ndarray:
    """A weight of `named_weights`, read whole."""
    if isinstance(weight, tf_internals.sharded_variable_type()):
        return tf.convert_to_tensor(weight).numpy()
    return np.asarray(weight.numpy())


def whole_weights(model: tf.keras.Model) -> list[np.ndarray]:
    """model.get_weights(), with each table split over the parameter servers whole (where
    get_weights gives its parts)."""
    return [weight_value(v) for _, v in whole_variables(model)]


class _Blocks(tf_internals.trackable_base()):
    """The blocks of a table and of its slots, saved as slices of one logical [rows, dim] tensor
    each, as ShardedVariable saves its shards (so a checkpoint restores on any number of blocks).
    Block i holds `sizes[i]` rows from `offsets[i]`: the first rows % N blocks one row more, as
    TensorFlow's "div" lookup and its fixed-shards partitioner split. Its variables are not Keras
    weights: the Keras optimizer never sees them."""

    def __init__(self, rows: int, dim: int, shards: int, devices: dict[int, str], initial,
                 strategy, slots: bool = True):
        """devices: {block: the device of the replica that holds it}, this process's blocks
        (all of them in one process; under MultiWorkerMirroredStrategy, its replicas')."""
        self.rows, self.dim, self.shards, self.strategy = rows, dim, shards, strategy
        self.sizes = table_plan.block_sizes(rows, shards)
        self.offsets = [sum(self.sizes[:i]) for i in range(shards)]
        self.table, self.m, self.v = [None] * shards, [None] * shards, [None] * shards
        self.slots = slots
        for i, device in sorted(devices.items()):
            start, size = self.offsets[i], self.sizes[i]
            with strategy_lib.one_device(strategy, device):
                self.table[i] = tf.Variable(initial(start, size), name=f"rows_{i}",
                                            trainable=False)
                if slots:
                    self.m[i] = tf.Variable(tf.zeros([size, dim]), name=f"m_{i}",
                                            trainable=False)
                    self.v[i] = tf.Variable(tf.zeros([size, dim]), name=f"v_{i}",
                                            trainable=False)

    @property
    def devices(self) -> dict[int, str]:
        return {i: block.device for i, block in enumerate(self.table) if block is not None}

    @property
    def whole_here(self) -> bool:
        """Whether this process holds every block (one process, MirroredStrategy)."""
        return all(block is not None for block in self.table)

    def gathered(self, kind: str = "table") -> tf.Tensor:
        """The whole [rows, dim] of `kind` (table, m, v): this process's blocks, or under
        MultiWorkerMirroredStrategy every worker's, gathered (a collective: every worker calls
        it at the same point)."""
        blocks = getattr(self, kind)
        if self.whole_here:
            return tf.concat([tf.convert_to_tensor(block) for block in blocks], axis=0)
        values = self.strategy.experimental_distribute_values_from_function(
            lambda context: tf.convert_to_tensor(blocks[context.replica_id_in_sync_group]))
        return self.strategy.gather(values, axis=0)

    def assign_whole(self, kind: str, whole) -> None:
        """Sets this process's blocks of `kind` from the whole [rows, dim]."""
        for i, block in enumerate(getattr(self, kind)):
            if block is not None:
                block.assign(whole[self.offsets[i]:self.offsets[i] + self.sizes[i]])

    def _gather_saveables_for_checkpoint(self):
        kinds = {"rows": "table", "m": "m", "v": "v"} if self.slots else {"rows": "table"}
        if self.whole_here:  # each block a slice of the one tensor
            def slices(kind):
                return lambda name: [
                    tf_internals.slice_saveable(block, [self.rows, self.dim], [offset, 0], name)
                    for block, offset in zip(getattr(self, kind), self.offsets)]
            return {name: slices(kind) for name, kind in kinds.items()}

        # Several processes: each saves the gathered whole (the chief's kept), restores its own.
        def whole(kind):
            return lambda name: tf_internals.whole_saveable(
                name, lambda: self.gathered(kind), [self.rows, self.dim],
                lambda value: self.assign_whole(kind, value))
        return {name: whole(kind) for name, kind in kinds.items()}


@tf.keras.utils.register_keras_serializable(package="lockstep")
class ShardedEmbedding(tf.keras.layers.Layer):
    """ids [batch] -> rows [batch, dim] of a `rows` x `dim` table split in `shards` blocks, one
    on each of the strategy's replicas' devices (the module's docstring)."""

    def __init__(self, rows: int, dim: int, shards: int, embeddings_initializer="uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.rows, self.dim, self.shards = rows, dim, shards
        # The whole table's initializer: it starts as its Embedding would, in any number of blocks.
        self.embeddings_initializer = tf.keras.initializers.get(embeddings_initializer)

    @staticmethod
    def check_optimizer(optimizer) -> None:
        """Raises ValueError unless the optimizer is one whose row update `apply_gradients`
        makes: Adam, AdamW, SGD without Nesterov (in a LossScaleOptimizer or not)."""
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        if isinstance(inner, tf.keras.optimizers.SGD) and not inner.nesterov:
            return
        if isinstance(inner, (tf.keras.optimizers.Adam, tf.keras.optimizers.AdamW)) and not (
                inner.amsgrad):
            return
        raise ValueError(f"a table split over the replicas trains with Adam, AdamW or SGD; the "
                         f"optimizer is {type(inner).__name__} (trainer.shard_embeddings_over = "
                         "-1 keeps every table whole)")

    def build(self, input_shape):
        strategy = tf.distribute.get_strategy()
        devices = (list(strategy.extended.worker_devices) if tf.distribute.has_strategy()
                   else ["/cpu:0"])
        first = strategy_lib.first_replica(strategy) if self.shards > 1 else 0
        # Block i on replica i: this process's replicas are first .. first + len(devices) - 1.
        here = {i: devices[i - first] for i in range(self.shards)
                if first <= i < first + len(devices)}
        if self.shards > 1 and first + len(devices) > strategy.num_replicas_in_sync:
            raise ValueError(f"{self.name}: {self.shards} blocks, but the strategy has "
                             f"{strategy.num_replicas_in_sync} replicas")
        if self.shards == 1:
            here = {0: devices[0]}
        with tf.device("/cpu:0"):  # drawn whole once, as the Embedding draws it, then cut
            whole = self.embeddings_initializer([self.rows, self.dim], tf.float32)
        self.blocks = _Blocks(self.rows, self.dim, self.shards, here,
                              lambda start, count: whole[start:start + count], strategy)
        super().build(input_shape)

    @plain  # traced as written: trainer_module/autograph_rules.py
    def call(self, ids):
        """The rows of `ids` outside a training step: one table over the blocks."""
        ids = tf.cast(ids, tf.int64)
        if self.shards == 1:
            return tf.gather(self.blocks.table[0], ids)
        if not self.blocks.whole_here:  # every worker's blocks, gathered (all call it)
            return tf.gather(self.blocks.gathered(), ids)
        return tf.nn.embedding_lookup(self.blocks.table, ids)

    def kept_copy(self) -> _Blocks:
        """Blocks of the same rows on the same devices, without slots (the best weights early
        stopping keeps, trainer_module/early_stopping.py)."""
        blocks = iter(b for b in self.blocks.table if b is not None)
        return _Blocks(self.rows, self.dim, self.shards, self.blocks.devices,
                       lambda start, count: next(blocks), self.blocks.strategy, slots=False)

    def keep(self, copy: _Blocks) -> None:
        for kept, block in zip(copy.table, self.blocks.table):
            if block is not None:
                kept.assign(block)

    def restore(self, copy: _Blocks) -> None:
        for block, kept in zip(self.blocks.table, copy.table):
            if block is not None:
                block.assign(kept)

    def whole(self) -> np.ndarray:
        """The logical [rows, dim] table, in this process's memory (under
        MultiWorkerMirroredStrategy gathered from every worker: all of them call it)."""
        return self.blocks.gathered().numpy()

    def assign_whole(self, table) -> None:
        """Sets the logical table (a [rows, dim] array): this process's blocks of it."""
        self.blocks.assign_whole("table", np.asarray(table, np.float32))

    # --- the training step's side (replica context) ---

    def _mine(self):
        """(the replica context, this replica's index, the index of the block it owns or None:
        a table of fewer rows than replicas has a block on the first `rows` replicas only). The
        replica's id is static under MirroredStrategy and MultiWorkerMirroredStrategy."""
        context = tf.distribute.get_replica_context()
        index = tf.get_static_value(context.replica_id_in_sync_group)
        if index is None:
            raise NotImplementedError(f"{self.name}: a sharded table needs a static replica id "
                                      "(MirroredStrategy, MultiWorkerMirroredStrategy)")
        index = int(index)
        return context, index, (index if index < self.shards else None)

    def _owned(self, every, block):
        """(each gathered id's row in `block`, whether the block holds it)."""
        local = every - self.blocks.offsets[block]
        return local, (local >= 0) & (local < self.blocks.sizes[block])

    @plain
    def exchange(self, ids) -> tf.Tensor:
        """[batch, dim]: the rows of this replica's ids, from the replicas that own them."""
        ids = tf.cast(ids, tf.int64)
        if self.shards == 1:
            return tf.gather(self.blocks.table[0], ids)
        context, index, block = self._mine()
        # tf.identity: made in the replica's device scope, so the collective has a device to
        # gather to (the input's element may have none, under MultiWorkerMirroredStrategy).
        every = context.all_gather(tf.identity(ids), axis=0)  # [replicas x batch], in order
        if block is None:
            rows = tf.zeros([tf.shape(every)[0], self.dim])
        else:
            local, owned = self._owned(every, block)
            rows = tf.gather(self.blocks.table[block], tf.where(owned, local, 0))
            rows = tf.where(owned[:, None], rows, tf.zeros_like(rows))
        summed = context.all_reduce(tf.distribute.ReduceOp.SUM, rows)
        batch = tf.shape(ids)[0]
        return summed[index * batch:(index + 1) * batch]

    @plain
    def row_gradients(self, ids, grads) -> tf.IndexedSlices | None:
        """The gradient of this replica's block (None: it holds none): every replica's examples'
        gradients gathered, those of the rows it owns added up per row in float64."""
        ids = tf.cast(ids, tf.int64)
        grads = tf.cast(grads, tf.float32)
        if self.shards == 1:
            block, every, every_grad = 0, ids, grads
        else:
            context, _, block = self._mine()
            every = context.all_gather(tf.identity(ids), axis=0)
            every_grad = context.all_gather(tf.identity(grads), axis=0)
            if block is None:
                return None
        local, owned = self._owned(every, block)
        local = tf.boolean_mask(local, owned)
        values = tf.boolean_mask(every_grad, owned)
        rows, where = tf.unique(local)
        summed = tf.math.unsorted_segment_sum(tf.cast(values, tf.float64), where,
                                              tf.shape(rows)[0])
        return tf.IndexedSlices(tf.cast(summed, tf.float32), rows,
                                tf.constant([self.blocks.sizes[block], self.dim], tf.int64))

    @plain
    def apply_gradients(self, grad: tf.IndexedSlices, optimizer) -> None:
        """The optimizer's sparse update of this replica's block, as tf.keras makes it on one
        device (tf_keras/src/optimizers/adam.py, adamw.py, sgd.py), right after the optimizer's
        own apply_gradients: its learning rate is then this step's (a schedule's value is set as
        the update begins), and its count of updates includes this one. Adam, AdamW (the run's)
        and SGD (`lockstep verify`'s)."""
        inner = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's
        block = 0 if self.shards == 1 else self._mine()[2]
        if grad is None or block is None:
            return
        table, m, v = self.blocks.table[block], self.blocks.m[block], self.blocks.v[block]
        lr = tf.cast(inner.learning_rate, tf.float32)
        if decay := table_decay.rate(inner):  # the whole table's decay on one device
            table_decay.shrink(table, decay, lr)
        if isinstance(inner, tf.keras.optimizers.SGD):
            m.assign(m * tf.cast(inner.momentum, tf.float32))
            m.scatter_add(tf.IndexedSlices(-grad.values * lr, grad.indices))
            table.assign_add(m)
            return
        step = tf.cast(inner.iterations, tf.float32)
        beta_1, beta_2 = tf.cast(inner.beta_1, tf.float32), tf.cast(inner.beta_2, tf.float32)
        alpha = lr * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
        m.assign_add(-m * (1 - inner.beta_1))
        m.scatter_add(tf.IndexedSlices(grad.values * (1 - inner.beta_1), grad.indices))
        v.assign_add(-v * (1 - inner.beta_2))
        v.scatter_add(tf.IndexedSlices(tf.square(grad.values) * (1 - inner.beta_2), grad.indices))
        table.assign_sub((m * alpha) / (tf.sqrt(v) + inner.epsilon))

    def get_config(self):
        return {**super().get_config(), "rows": self.rows, "dim": self.dim,
                "shards": self.shards, "embeddings_initializer":
                    tf.keras.initializers.serialize(self.embeddings_initializer)}
