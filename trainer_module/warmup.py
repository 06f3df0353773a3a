"""The learning-rate schedule of the scaling rules: linear warmup to the scaled rate, flat, then
a linear decay to zero over the last steps (the plan's decay_steps).

Where early stopping decides how long a run is (a large table, whose planned steps are a ceiling),
the decay's end is a variable (`Horizon`): when the validation rows stop improving, early stopping
moves it to a cooldown from that step (warmup, stable, decay: the decay can start at any step and
still gives its gain), and the run ends there. The variables are in the Controller's checkpoints,
so a resumed run decays over the same steps."""

from __future__ import annotations

import tensorflow as tf


class Horizon(tf.Module):
    """Where the decay ends (`end`, the run's last step + 1) and how many steps it takes
    (`decay`): the plan's, until `cool_down` moves them. Made in the strategy's scope."""

    def __init__(self, total_steps: int, decay_steps: int):
        super().__init__(name="horizon")
        self.planned = total_steps
        self.end = tf.Variable(total_steps, trainable=False, dtype=tf.int64, name="end")
        self.decay = tf.Variable(decay_steps, trainable=False, dtype=tf.int64, name="decay")

    @property
    def cooling(self) -> bool:
        """Whether a cooldown moved the end before the planned steps."""
        return int(self.end.numpy()) < self.planned

    def cool_down(self, step: int, steps: int) -> None:
        """The rate decays from `step` over `steps` steps; the run ends at step + steps."""
        self.end.assign(step + steps)
        self.decay.assign(steps)


class WarmupSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from lr/warmup to lr over `warmup_steps`, then lr; over the last
    `decay_steps` of `total_steps` it falls linearly, to lr/decay_steps at the last step (every
    step still learns). decay_steps 0: flat to the end. With a `horizon`, its variables say where
    the decay ends and how long it is."""

    def __init__(self, learning_rate: float, warmup_steps: int, total_steps: int = 0,
                 decay_steps: int = 0, horizon: Horizon | None = None):
        self.learning_rate = learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay_steps = decay_steps if total_steps else 0
        self.horizon = horizon if self.decay_steps else None

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = tf.cast(max(self.warmup_steps, 1), tf.float32)
        rate = self.learning_rate * tf.minimum(1.0, (step + 1.0) / warmup)
        if self.horizon is not None:
            left = tf.cast(self.horizon.end, tf.float32) - step
            rate *= tf.clip_by_value(left / tf.cast(self.horizon.decay, tf.float32), 0.0, 1.0)
        elif self.decay_steps:
            left = tf.cast(self.total_steps, tf.float32) - step  # this step and those after it
            rate *= tf.clip_by_value(left / float(self.decay_steps), 0.0, 1.0)
        return rate

    def get_config(self):
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "decay_steps": self.decay_steps}
