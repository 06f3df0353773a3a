"""The synchronous train step and the loop that runs `steps_per_execution` of them per host call.

Per replica: per-example losses, divided by the *global* batch (tf.nn.compute_average_loss), plus
regularization scaled by 1/replicas (tf.nn.scale_regularization_loss); gradients; one
`apply_gradients`, which all-reduces (sums) the replicas' gradients and makes one update. Summed
over replicas, the loss and the gradient are exactly those of one device on the global batch.
"""

from __future__ import annotations

from typing import Callable, Mapping

import tensorflow as tf


class NonFiniteLoss(RuntimeError):
    """Training produced a NaN or infinite loss; the message names the global step."""


def global_average(global_batch: int) -> Callable[[tf.Tensor], tf.Tensor]:
    """The correct per-replica reduction: sum of per-example losses / global batch."""
    return lambda per_example: tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)


class Trainer:
    """Owns the train step (Orbit's StandardTrainer, in small). train(n) runs n global steps in
    one tf.function, a tf.range loop, so a TPU host is called once per n steps."""

    def __init__(self, strategy: tf.distribute.Strategy, model: tf.keras.Model,
                 optimizer: tf.keras.optimizers.Optimizer, per_example_loss, global_batch: int,
                 dataset, *, metrics: Mapping[str, tf.keras.metrics.Metric] | None = None,
                 jit_compile: bool = False,
                 average_loss: Callable[[tf.Tensor], tf.Tensor] | None = None):
        """metrics: {logs key: metric made in strategy.scope()}, updated with (labels, outputs)
        on every step and reported (then reset) by each train(n)."""
        self.strategy, self.model, self.optimizer = strategy, model, optimizer
        self.per_example_loss = per_example_loss
        self.global_batch = global_batch
        self.average_loss = average_loss or global_average(global_batch)
        self.metrics = dict(metrics or {})
        self._iterator = iter(dataset)
        self._gradients = (tf.function(self._compute_gradients, jit_compile=True)
                           if jit_compile else self._compute_gradients)
        self._loop = tf.function(self._run_steps)

    def _compute_gradients(self, x, y):
        with tf.GradientTape() as tape:
            outputs = self.model(x, training=True)
            loss = self.average_loss(self.per_example_loss(y, outputs))
            if self.model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
        return tape.gradient(loss, self.model.trainable_variables), loss, outputs

    def _replica_step(self, inputs):
        x, y = inputs
        grads, loss, outputs = self._gradients(x, y)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        for metric in self.metrics.values():
            metric.update_state(y, outputs)
        # A NaN input can hide behind a ReLU in the loss yet poison the gradient: watch both.
        return loss, tf.linalg.global_norm(grads)

    def _run_steps(self, num_steps):
        total = tf.constant(0.0)
        done = tf.constant(0)
        last = tf.constant(0.0)
        for _ in tf.range(num_steps):
            loss, norm = self.strategy.run(self._replica_step, args=(next(self._iterator),))
            last = self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
            norm = self.strategy.reduce(tf.distribute.ReduceOp.SUM, norm, axis=None)
            done += 1
            if not tf.math.is_finite(last + norm):
                last = last + norm
                break
            total += last
        return total / tf.cast(tf.maximum(done, 1), tf.float32), last, done

    def train(self, num_steps: int) -> dict[str, float]:
        """Runs num_steps global steps; raises NonFiniteLoss naming the step that went bad."""
        start = int(self.optimizer.iterations.numpy())
        mean_loss, last, done = self._loop(tf.constant(num_steps))
        done = int(done)
        if not bool(tf.math.is_finite(last)):
            raise NonFiniteLoss(f"loss or gradient became {float(last)} at global step {start + done}; "
                                "training stopped (lower the learning rate or check the data)")
        logs = {"loss": float(mean_loss), "steps": done}
        for key, metric in self.metrics.items():
            logs[key] = float(metric.result())
            metric.reset_state()
        return logs
