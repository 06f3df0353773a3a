"""The learning-rate schedule of the scaling rules: linear warmup to the scaled rate, flat, then
a linear decay to zero over the last steps (the plan's decay_steps)."""

from __future__ import annotations

import tensorflow as tf


class WarmupSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from lr/warmup to lr over `warmup_steps`, then lr; over the last
    `decay_steps` of `total_steps` it falls linearly, to lr/decay_steps at the last step (every
    step still learns). decay_steps 0: flat to the end."""

    def __init__(self, learning_rate: float, warmup_steps: int, total_steps: int = 0,
                 decay_steps: int = 0):
        self.learning_rate = learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay_steps = decay_steps if total_steps else 0

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = tf.cast(max(self.warmup_steps, 1), tf.float32)
        rate = self.learning_rate * tf.minimum(1.0, (step + 1.0) / warmup)
        if self.decay_steps:
            left = tf.cast(self.total_steps, tf.float32) - step  # this step and those after it
            rate *= tf.clip_by_value(left / float(self.decay_steps), 0.0, 1.0)
        return rate

    def get_config(self):
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "decay_steps": self.decay_steps}
