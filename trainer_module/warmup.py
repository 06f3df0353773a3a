"""The learning-rate schedule of the scaling rules: linear warmup to the scaled rate, then flat."""

from __future__ import annotations

import tensorflow as tf


class WarmupSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from lr/warmup to lr over `warmup_steps`, then constant."""

    def __init__(self, learning_rate: float, warmup_steps: int):
        self.learning_rate = learning_rate
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        warmup = tf.cast(max(self.warmup_steps, 1), tf.float32)
        return self.learning_rate * tf.minimum(1.0, step / warmup)

    def get_config(self):
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps}
