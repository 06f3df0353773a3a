"""What the Controller does after each chunk of training, apart from when it does it.

An action is a callable on (step, logs): the global step after the chunk and the Trainer's logs,
a dict the action may add keys to (the Controller returns the last one). A condition is a
callable on the same arguments returning whether to act; `ConditionalAction` joins the two, as in
Orbit's orbit/actions/conditional_action.py, so "every 100 steps" or "once a second" is written
once and not again inside each thing that is done.

Either may have `begin(step)` (called once when Controller.train starts, with the step it starts
from) and `end(step, logs)` (once when it stops); plain functions need neither.

The actions here are the trainer's own: examples/s and the learning rate added to the logs,
TensorBoard scalars, the `step %d/%d  loss ...` log line, and the typed progress records a console
draws (progress.Progress on the PROGRESS_LOGGER logger).
"""

from __future__ import annotations

import dataclasses
import logging as std_logging
import os
import time
from typing import Callable, Iterable, Sequence

from absl import logging
import tensorflow as tf

from runtime.progress import PROGRESS_LOGGER, Progress

Logs = dict
Action = Callable[[int, Logs], None]
Condition = Callable[[int, Logs], bool]

STOP_TRAINING = "stop_training"  # an action sets logs[STOP_TRAINING]: the Controller stops
PROGRESS_SECONDS = 1.0  # at most one progress record this often
NOT_SUMMARIZED = ("steps", STOP_TRAINING)  # log keys that are bookkeeping, not scalars


def begin(things: Iterable, step: int) -> None:
    """Calls `begin(step)` on each of `things` that has one."""
    for thing in things:
        if hasattr(thing, "begin"):
            thing.begin(step)


def end(things: Iterable, step: int, logs: Logs) -> None:
    """Calls `end(step, logs)` on each of `things` that has one."""
    for thing in things:
        if hasattr(thing, "end"):
            thing.end(step, logs)


class ConditionalAction:
    """Runs `action` (one, or a sequence in order) only after the chunks where `condition` holds."""

    def __init__(self, condition: Condition, action: Action | Sequence[Action]):
        self.condition = condition
        self.actions = list(action) if isinstance(action, Sequence) else [action]

    def begin(self, step: int) -> None:
        begin([self.condition, *self.actions], step)

    def end(self, step: int, logs: Logs) -> None:
        end(self.actions, step, logs)

    def __call__(self, step: int, logs: Logs) -> None:
        if self.condition(step, logs):
            for action in self.actions:
                action(step, logs)


class EveryNSteps:
    """True once at least `n` steps have passed since it was last true (or since training
    started), and always at `final_step` or where an action stops training."""

    def __init__(self, n: int, final_step: int | None = None):
        self.n, self.final_step = max(n, 1), final_step
        self.last = 0

    def begin(self, step: int) -> None:
        self.last = step

    def __call__(self, step: int, logs: Logs) -> bool:
        if step - self.last >= self.n or step == self.final_step or logs.get(STOP_TRAINING):
            self.last = step
            return True
        return False


class EveryNSeconds:
    """True once at least `seconds` have passed since it was last true, counting from the end
    of the first chunk (which traces the step function), and always at `final_step` or where an
    action stops training (early stopping)."""

    def __init__(self, seconds: float, final_step: int | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.seconds, self.final_step, self.clock = seconds, final_step, clock
        self.last: float | None = None

    def begin(self, step: int) -> None:
        self.last = None

    def __call__(self, step: int, logs: Logs) -> bool:
        now = self.clock()
        last = step == self.final_step or bool(logs.get(STOP_TRAINING))
        if self.last is None:
            self.last = now
            return last
        if now - self.last >= self.seconds or last:
            self.last = now
            return True
        return False


class Throughput:
    """Adds logs["examples_per_sec"] for the chunk just run; keeps `seconds_per_step`, the steady
    rate since the end of the first chunk (None until there is one), for ETAs."""

    def __init__(self, global_batch: int, clock: Callable[[], float] = time.perf_counter):
        self.global_batch, self.clock = global_batch, clock
        self.seconds_per_step: float | None = None
        self._tic = clock()
        self._since: tuple[float, int] | None = None

    def begin(self, step: int) -> None:
        self._tic, self._since, self.seconds_per_step = self.clock(), None, None

    def __call__(self, step: int, logs: Logs) -> None:
        now = self.clock()
        logs["examples_per_sec"] = logs.get("steps", 0) * self.global_batch / max(now - self._tic, 1e-9)
        self._tic = now
        if self._since is None:
            self._since = (now, step)
        elif step > self._since[1]:
            self.seconds_per_step = (now - self._since[0]) / (step - self._since[1])


class LearningRate:
    """Adds logs["learning_rate"]: the schedule's rate at the step."""

    def __init__(self, schedule: Callable[[int], float]):
        self.schedule = schedule

    def __call__(self, step: int, logs: Logs) -> None:
        logs["learning_rate"] = float(self.schedule(step))


class Summaries:
    """Writes every number in the logs as a TensorBoard scalar at the step; flushes at the end."""

    def __init__(self, directory: str):
        self.writer = tf.summary.create_file_writer(directory)

    def __call__(self, step: int, logs: Logs) -> None:
        with self.writer.as_default(step=step):
            for key, value in logs.items():
                if key not in NOT_SUMMARIZED:
                    tf.summary.scalar(key, value)

    def end(self, step: int, logs: Logs) -> None:
        self.writer.flush()


class LogLine:
    """absl's `step 120/1000  loss 0.4312  accuracy 0.8125 ...` line."""

    def __init__(self, total_steps: int):
        self.total_steps = total_steps

    def __call__(self, step: int, logs: Logs) -> None:
        logging.info("step %d/%d  %s", step, self.total_steps, "  ".join(
            f"{k} {v:.4g}" for k, v in logs.items() if k not in NOT_SUMMARIZED))


class ProgressRecord:
    """A progress.Progress on the PROGRESS_LOGGER logger, as a dict in the record's `progress`
    (what pipeline/local/console.py reads); nothing until `throughput` has a steady rate."""

    def __init__(self, total_steps: int, throughput: Throughput):
        self.total_steps, self.throughput = total_steps, throughput
        self.logger = std_logging.getLogger(PROGRESS_LOGGER)

    def __call__(self, step: int, logs: Logs) -> None:
        per_step = self.throughput.seconds_per_step
        if per_step is None:
            return
        progress = Progress(step=step, total=self.total_steps, loss=float(logs.get("loss", 0.0)),
                            examples_per_sec=self.throughput.global_batch / max(per_step, 1e-9),
                            eta=per_step * (self.total_steps - step))
        self.logger.info("step %d/%d", step, self.total_steps,
                         extra={"progress": dataclasses.asdict(progress)})


def standard_actions(*, total_steps: int, global_batch: int, log_every: int,
                     summary_dir: str | None = None,
                     learning_rate: Callable[[int], float] | None = None,
                     progress_seconds: float = PROGRESS_SECONDS) -> list:
    """The trainer's actions in the order they run: examples/s and learning rate into the logs,
    scalars every chunk, the log line every `log_every` steps, progress about once a second (the
    last two also at the final step)."""
    throughput = Throughput(global_batch)
    actions: list = [throughput]
    if learning_rate is not None:
        actions.append(LearningRate(learning_rate))
    if summary_dir:
        actions.append(Summaries(summary_dir))
    actions.append(ConditionalAction(EveryNSteps(log_every, final_step=total_steps),
                                     LogLine(total_steps)))
    actions.append(ConditionalAction(EveryNSeconds(progress_seconds, final_step=total_steps),
                                     ProgressRecord(total_steps, throughput)))
    return actions


def summary_dir(model_run_dir: str) -> str:
    """Where the training scalars go: <model_run_dir>/train (TensorBoard's usual layout)."""
    return os.path.join(model_run_dir, "train")
