"""The synchronous train step and the loop that runs `steps_per_execution` of them per host call.

Per replica: per-example losses, divided by the *global* batch (tf.nn.compute_average_loss), plus
regularization scaled by 1/replicas (tf.nn.scale_regularization_loss); gradients; the replicas'
gradients summed in float64 (strategy.sum_over_replicas: the same sum in any order, so N worker
processes make the update N replicas in one process make, bit for bit), then one
`apply_gradients`. Summed over replicas, the loss and the gradient are exactly those of one device
on the global batch.

With `accumulation_steps` K > 1 each replica gets K micro-batches per global step (one input
batch of K x per-replica batch, cut in K), takes the gradient of each (loss over the same global
batch, per-replica batch x replicas x K; regularization over replicas x K) and sums them, then
makes the one update: the same sum as one device on the global batch, with the activations of one
micro-batch in memory at a time.

Under mixed_float16 (trainer_module/precision.py) the optimizer is a LossScaleOptimizer: the loss
is scaled once before the gradients (each micro-batch's by the same scale) and the summed gradients
unscaled once; a step whose gradients are not finite is skipped by the optimizer (its scale
halves) and counted here, not an error. A non-finite *loss* stops training under every precision.
"""

from __future__ import annotations

from typing import Callable, Mapping

import tensorflow as tf

from trainer_module import autograph_rules, model as model_lib, precision, strategy as strategy_lib
from trainer_module import row_dropout, target_statistics

autograph_rules.install()  # tf_keras unconverted in the traced step (its docstring says why)
strategy_lib.quiet_device_iterators()  # freeing the input takes no minutes (its docstring says why)


class NonFiniteLoss(RuntimeError):
    """Training produced a NaN or infinite loss; the message names the global step."""


def global_average(global_batch: int) -> Callable[[tf.Tensor], tf.Tensor]:
    """The correct per-replica reduction: sum of per-example losses / global batch."""
    return lambda per_example: tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)


def steps_while_finite(num_steps, step, state=()):
    """The steps of one host call, traced as written (trainer_module/autograph_rules.py): a
    tf.while_loop of up to num_steps calls of `step(state) -> (loss, norm, skip, state)`, the
    loss and the gradient's norm reduced over the replicas. It ends after the first step whose
    loss + norm is not finite, unless `skip` says the optimizer skipped that update (a loss
    scale's overflow, counted, not a stop). Returns (the sum of the losses of the finite steps,
    the last loss, or the bad step's loss + norm; steps done; steps skipped; state)."""

    def body(done, stopped, total, last, skipped, state):
        loss, norm, skip, state = step(state)
        stopped = tf.logical_and(tf.logical_not(skip),
                                 tf.logical_not(tf.math.is_finite(loss + norm)))
        return (done + 1, stopped, tf.where(stopped, total, total + loss),
                tf.where(stopped, loss + norm, loss), skipped + tf.cast(skip, tf.int32), state)

    done, _, total, last, skipped, state = tf.while_loop(
        lambda done, stopped, *_: tf.logical_and(done < num_steps, tf.logical_not(stopped)),
        body, (tf.constant(0), tf.constant(False), tf.constant(0.0), tf.constant(0.0),
               tf.constant(0), state), maximum_iterations=num_steps)
    return total, last, done, skipped, state


def _micro_shape(t: tf.Tensor, k: int):
    """[k, batch / k, ...]: static where the batch is (drop_remainder), as XLA and TPUs want."""
    if t.shape[0] is not None:
        return [k, t.shape[0] // k] + t.shape[1:].as_list()
    return tf.concat([[k, -1], tf.shape(t)[1:]], 0)


class SynchronousLoop:
    """Owns the train step (Orbit's StandardTrainer, in small). train(n) runs n global steps in
    one tf.function, a tf.while_loop, so a TPU host is called once per n steps."""

    def __init__(self, strategy: tf.distribute.Strategy, model: tf.keras.Model,
                 optimizer: tf.keras.optimizers.Optimizer, per_example_loss, global_batch: int,
                 dataset, *, metrics: Mapping[str, tf.keras.metrics.Metric] | None = None,
                 jit_compile: bool = False, accumulation_steps: int = 1,
                 average_loss: Callable[[tf.Tensor], tf.Tensor] | None = None,
                 weight_average=None):
        """global_batch: the examples of one update (per-replica batch x replicas x
        accumulation_steps); the dataset gives each replica accumulation_steps x per-replica
        batch per step. metrics: {logs key: metric made in strategy.scope()}, updated with
        (labels, outputs) on every (micro-)batch and reported (then reset) by each train(n).
        weight_average: a weight_average.WeightAverage, moved after every global step."""
        self.strategy, self.model, self.optimizer = strategy, model, optimizer
        self.per_example_loss = autograph_rules.users(per_example_loss)  # a user's: converted
        self.global_batch = global_batch
        self.accumulation_steps = max(accumulation_steps, 1)
        self.average_loss = average_loss or global_average(global_batch)
        self.metrics = dict(metrics or {})
        self.weight_average = weight_average
        self.loss_scaled = precision.loss_scaled(optimizer)
        self.skipped_steps = 0  # mixed_float16: steps the LossScaleOptimizer skipped (overflow)
        self._iterator = iter(dataset)
        row_dropout.attach(model, optimizer)  # its masks keyed on the global step
        # A model with tables split over the replicas: the step looks their rows up and updates
        # them itself (trainer_module/sharded_embedding.py), and differentiates the rest.
        self._differentiated, self.tables = model_lib.sharded_parts(model)
        self._table_keys = sorted(self.tables)
        for table in self.tables.values():
            table.check_optimizer(optimizer)
        with strategy.scope():
            # The slots now, not in the step's first trace: a tf.function that creates variables
            # is traced twice.
            optimizer.build(model.trainable_variables)
        # Traced as written, its loops and checks written out (trainer_module/autograph_rules.py):
        # AutoGraph rewrote this module's functions in every Trainer's first trace.
        self._gradients = (tf.function(self._compute_gradients, jit_compile=True, autograph=False)
                           if jit_compile else self._compute_gradients)
        # The iterator is an argument: `restart` gives the traced loop another fit's input.
        self._loop = tf.function(self._run_steps, autograph=False)

    def restart(self, dataset) -> "SynchronousLoop":
        """The same traced step over another input (a refit's, trainer_module/reuse.py): its
        iterator has the same element spec, so the loop is not traced again."""
        self._iterator = iter(dataset)
        return self

    def _compute_gradients(self, x, y):
        """(the variables' gradients, the sharded tables' rows' gradients, loss, outputs)."""
        model = self._differentiated
        with tf.GradientTape() as tape:
            rows = [x[key] for key in self._table_keys]
            for looked_up in rows:
                tape.watch(looked_up)
            with autograph_rules.in_users_code():  # a user's layer's tensor `if` still traces
                outputs = model(x, training=True)
            if outputs.dtype != tf.float32:  # a 16-bit last layer: the loss is taken in float32
                outputs = tf.cast(outputs, tf.float32)
            loss = self.average_loss(self.per_example_loss(y, outputs))
            if model.losses:
                regularization = tf.nn.scale_regularization_loss(tf.add_n(model.losses))
                if self.accumulation_steps > 1:  # added once per micro-batch
                    regularization /= self.accumulation_steps
                loss += regularization
            scaled = self.optimizer.get_scaled_loss(loss) if self.loss_scaled else loss
        variables = model.trainable_variables
        grads = tape.gradient(scaled, variables + rows)
        row_grads = [tf.zeros_like(r) if g is None else g
                     for r, g in zip(rows, grads[len(variables):])]
        return grads[:len(variables)], row_grads, loss, outputs

    def _update_metrics(self, y, outputs):
        if self.metrics and outputs.shape.rank == 3:
            # An ensemble's members in training, [batch, k, classes] (trainer_module/model.py):
            # the mean of their probabilities is the prediction. (Train metrics are a
            # classifier's: a regression has none.)
            outputs = tf.reduce_mean(tf.nn.softmax(outputs), axis=1)
        for metric in self.metrics.values():
            metric.update_state(y, outputs)

    def _accumulate(self, x, y):
        """The summed gradients and loss of the replica's accumulation_steps micro-batches."""
        k = self.accumulation_steps
        micro = tf.nest.map_structure(lambda t: tf.reshape(t, _micro_shape(t, k)), (x, y))
        variables = self._differentiated.trainable_variables
        wide = strategy_lib.summing_dtype(self.strategy)  # exact sums (its docstring)
        sums = [tf.zeros_like(v, dtype=wide) for v in variables]
        # A sharded table's rows' gradients, each micro-batch's in its place in the batch.
        looked_up = [tf.TensorArray(tf.float32, size=k) for _ in self._table_keys]
        rows = set()  # the embeddings, whose gradients come as IndexedSlices (rows)

        def micro_step(i, sums, looked_up, total):
            xi, yi = tf.nest.map_structure(lambda t: t[i], micro)
            grads, row_grads, loss, outputs = self._gradients(xi, yi)
            self._update_metrics(yi, outputs)
            rows.update(j for j, g in enumerate(grads) if isinstance(g, tf.IndexedSlices))
            sums = [s if g is None else s + strategy_lib.widened(g, wide)
                    for s, g in zip(sums, grads)]
            looked_up = [a.write(i, tf.cast(g, tf.float32)) for a, g in zip(looked_up, row_grads)]
            return i + 1, sums, looked_up, total + loss

        _, sums, looked_up, total = tf.while_loop(
            lambda i, *_: i < k, micro_step, (tf.constant(0), sums, looked_up, tf.constant(0.0)),
            maximum_iterations=k)
        row_grads = [tf.reshape(a.stack(), [-1, self.tables[key].dim])
                     for a, key in zip(looked_up, self._table_keys)]
        return [strategy_lib.as_rows(s) if j in rows else s
                for j, s in enumerate(sums)], row_grads, total

    def _replica_step(self, inputs):
        x, y = inputs
        ids = {}
        if self._table_keys:
            # Each sharded table's rows for this replica's examples, from the replicas that own
            # them: once a global step, outside the tape, the micro-batches' loop and XLA.
            ids = {key: x[key] for key in self._table_keys}
            x = target_statistics.with_ids(self._differentiated, {**x, **{
                key: self.tables[key].exchange(ids[key]) for key in self._table_keys}}, ids)
        if self.accumulation_steps > 1:
            grads, row_grads, loss = self._accumulate(x, y)
        else:
            grads, row_grads, loss, outputs = self._gradients(x, y)
            self._update_metrics(y, outputs)
        if self.loss_scaled:
            grads = self.optimizer.get_unscaled_gradients(grads)
            row_grads = self.optimizer.get_unscaled_gradients(row_grads)
        variables = self._differentiated.trainable_variables
        grads = strategy_lib.sum_over_replicas(self.strategy, grads, variables)
        norm = tf.linalg.global_norm(grads + row_grads)
        # Each sharded table's rows' gradients, gathered from every replica by those that own them.
        row_grads = [self.tables[key].row_gradients(ids[key], g)
                     for key, g in zip(self._table_keys, row_grads)]
        self.optimizer.apply_gradients(zip(grads, variables), skip_gradients_aggregation=True)
        if self._table_keys:
            self._update_tables(row_grads, grads)
        # A NaN input can hide behind a ReLU in the loss yet poison the gradient: watch both.
        return loss, norm

    def _update_tables(self, row_grads, grads):
        """Each sharded table's rows updated by the replica that owns them, after the optimizer's
        update (the rows take its step and learning rate). Under loss scaling, skipped where the
        optimizer skips: a gradient, of the variables or any replica's rows, not finite."""
        tables = [self.tables[key] for key in self._table_keys]

        def update():
            for table, g in zip(tables, row_grads):
                table.apply_gradients(g, self.optimizer)
            return tf.constant(True)

        if not self.loss_scaled:
            update()
            return
        bad = tf.add_n([tf.constant(0.0)] + [
            tf.reduce_sum(tf.cast(~tf.math.is_finite(g.values), tf.float32))
            for g in row_grads if g is not None])
        if self.strategy.num_replicas_in_sync > 1:
            bad = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, bad)
        finite = tf.math.logical_and(tf.equal(bad, 0.0), tf.math.is_finite(
            tf.linalg.global_norm([g for g in grads if g is not None])))
        tf.cond(finite, update, lambda: tf.constant(False))

    def _run_steps(self, iterator, num_steps):
        """num_steps global steps, or fewer where a loss or gradient is not finite (the step
        that went bad is the last): (their mean loss, the last loss, steps done, steps skipped)."""

        def step(_):
            loss, norm = self.strategy.run(self._replica_step, args=(next(iterator),))
            if self.weight_average is not None:
                self.weight_average.update(self.strategy, self.optimizer.iterations)
            last = self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
            norm = self.strategy.reduce(tf.distribute.ReduceOp.SUM, norm, axis=None)
            # The LossScaleOptimizer skipped this update and lowered its scale: not a stop.
            skip = (tf.logical_and(tf.math.is_finite(last), tf.logical_not(tf.math.is_finite(norm)))
                    if self.loss_scaled else tf.constant(False))
            return last, norm, skip, ()

        total, last, done, skipped, _ = steps_while_finite(num_steps, step)
        return total / tf.cast(tf.maximum(done, 1), tf.float32), last, done, skipped

    def train(self, num_steps: int) -> dict[str, float]:
        """Runs num_steps global steps; raises NonFiniteLoss naming the step that went bad."""
        start = int(self.optimizer.iterations.numpy())
        mean_loss, last, done, skipped = self._loop(self._iterator, tf.constant(num_steps))
        done = int(done)
        if not bool(tf.math.is_finite(last)):
            raise NonFiniteLoss(f"loss or gradient became {float(last)} at global step {start + done}; "
                                "training stopped (lower the learning rate or check the data)")
        logs = {"loss": float(mean_loss), "steps": done}
        if self.loss_scaled:
            self.skipped_steps += int(skipped)
            logs["skipped_steps"] = self.skipped_steps
            logs["loss_scale"] = float(self.optimizer.loss_scale)
        for key, metric in self.metrics.items():
            logs[key] = float(metric.result())
            metric.reset_state()
        return logs
