"""The Controller owns the outer loop (Orbit's Controller, in small): restore from the latest
checkpoint, call the Trainer `steps_per_execution` steps at a time, checkpoint every K steps,
write TensorBoard summaries and a progress line every N steps."""

from __future__ import annotations

import logging as std_logging
import os
import time
from typing import Callable

from absl import logging
import tensorflow as tf

from trainer_module.config import PROGRESS_LOGGER

PROGRESS_SECONDS = 1.0  # at most one progress record this often


def make_checkpoint_manager(model, optimizer, directory: str, max_to_keep: int = 3):
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep)


def restore(manager: tf.train.CheckpointManager, optimizer, directory: str | None = None) -> int:
    """Restores the latest checkpoint in `directory` (default: the manager's) if there is one;
    returns the global step to start from."""
    latest = tf.train.latest_checkpoint(directory) if directory else manager.latest_checkpoint
    if latest:
        manager.checkpoint.restore(latest)
        step = int(optimizer.iterations.numpy())
        logging.info("Resumed from %s at global step %d", latest, step)
        return step
    return 0


class Controller:
    def __init__(self, trainer, manager: tf.train.CheckpointManager, *, total_steps: int,
                 steps_per_execution: int, checkpoint_every: int, log_every: int,
                 summary_dir: str | None = None, learning_rate: Callable[[int], float] | None = None,
                 preemption_handler=None, callbacks=()):
        self.trainer, self.manager = trainer, manager
        self.total_steps = total_steps
        self.steps_per_execution = steps_per_execution
        self.checkpoint_every = max(checkpoint_every, 1)
        self.log_every = max(log_every, 1)
        self.learning_rate = learning_rate
        self.preemption_handler = preemption_handler
        self.callbacks = list(callbacks)
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None

    @property
    def step(self) -> int:
        return int(self.trainer.optimizer.iterations.numpy())

    def _next_chunk(self, step: int) -> int:
        to_checkpoint = self.checkpoint_every - step % self.checkpoint_every
        return min(self.steps_per_execution, self.total_steps - step, to_checkpoint)

    def train(self) -> dict[str, float]:
        step, logs = self.step, {}
        last_log, tic = step, time.perf_counter()
        progress = std_logging.getLogger(PROGRESS_LOGGER)
        rate_from, last_progress = None, 0.0  # (time, step) after the first call (it traces)
        global_batch = self.trainer.global_batch
        while step < self.total_steps:
            n = self._next_chunk(step)
            if self.preemption_handler is not None:
                logs = self.preemption_handler.run(self.trainer.train, n)
            else:
                logs = self.trainer.train(n)
            step = self.step
            elapsed = time.perf_counter() - tic
            logs["examples_per_sec"] = n * global_batch / max(elapsed, 1e-9)
            tic = time.perf_counter()
            if self.learning_rate is not None:
                logs["learning_rate"] = float(self.learning_rate(step))
            if self.writer is not None:
                with self.writer.as_default(step=step):
                    for key, value in logs.items():
                        if key != "steps":
                            tf.summary.scalar(key, value)
            if step % self.checkpoint_every == 0 or step == self.total_steps:
                self.manager.save(checkpoint_number=step)
            if step - last_log >= self.log_every or step == self.total_steps:
                last_log = step
                logging.info("step %d/%d  %s", step, self.total_steps, "  ".join(
                    f"{k} {v:.4g}" for k, v in logs.items() if k != "steps"))
            now = time.perf_counter()
            if rate_from is None:
                rate_from = (now, step)
            elif now - last_progress >= PROGRESS_SECONDS or step == self.total_steps:
                last_progress = now
                per_step = (now - rate_from[0]) / max(step - rate_from[1], 1)
                progress.info("step %d/%d", step, self.total_steps, extra={"progress": {
                    "step": step, "total": self.total_steps, "loss": float(logs.get("loss", 0.0)),
                    "examples_per_sec": global_batch / per_step,
                    "eta": per_step * (self.total_steps - step)}})
            for callback in self.callbacks:
                callback(step, logs)
        if self.writer is not None:
            self.writer.flush()
        return logs


def summary_dir(model_run_dir: str) -> str:
    return os.path.join(model_run_dir, "train")
