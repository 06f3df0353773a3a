"""The outer training loop, as in TF Model Garden's Orbit (orbit/controller.py), in small.

The Controller owns the checkpoints: a tf.train.CheckpointManager counting steps by the
optimizer's `iterations`, restored from when the Controller is made (so the caller knows the step
to resume at before it builds the input pipeline, which must skip the batches already trained
on), and saved every `checkpoint_every` steps by the manager's own interval check. It calls the
step loop (trainer_module/loop.py) `steps_per_execution` steps at a time, but ends a chunk at each multiple of
`checkpoint_every`, so a checkpoint lands exactly there (a killed run resumes from it), and saves
once more at the last step.

Everything else after a chunk (summaries, log lines, progress, validation, a test's kill) is an
action (trainer_module/actions.py), run after that chunk's checkpoint is on disk; an action that
sets logs[STOP_TRAINING] (early stopping) ends training there, with a checkpoint.

SIGTERM (runtime/termination.py) only raises a flag; after each chunk the workers agree on
it (`Agreement`: alone, the flag itself; under MultiWorkerMirroredStrategy, one small all-reduce
of every worker's flag, so a SIGTERM to one machine is seen by all at the same step). Then every
worker saves a checkpoint at that step and raises termination.Preempted, naming the workers the
signal reached; the chief records them beside the checkpoint (PREEMPTED_FILE), where the resumed
run reads them. This is the protocol of tf.distribute's PreemptionCheckpointHandler (save at the
same step on every worker, then exit), on lockstep's one SIGTERM path.

A checkpoint that does not read whole (a truncated or corrupt file, a file gone) is passed over
for the one before it, with a line saying so; in the Controller's own directory the bad one is
removed, so the manager's count of checkpoints holds only readable ones.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from absl import logging
import tensorflow as tf

from runtime import termination
from trainer_module import actions as actions_lib, strategy as strategy_lib
from trainer_module import tf_internals

# Beside the checkpoint a SIGTERM saved (the chief's): {"step": S, "signalled": [names]}.
PREEMPTED_FILE = "preempted.json"


def make_checkpoint_manager(model, optimizer, directory: str, checkpoint_every: int,
                            max_to_keep: int = 3, tracked=None) -> tf.train.CheckpointManager:
    """The model and optimizer's checkpoints in `directory` (and `tracked`, {name: trackable},
    saved with them), at most one per `checkpoint_every` steps of `optimizer.iterations` (with
    `save(check_interval=True)`)."""
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                     **{k: v for k, v in (tracked or {}).items() if v is not None})
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                      step_counter=optimizer.iterations,
                                      checkpoint_interval=max(checkpoint_every, 1))


class CheckpointMismatch(RuntimeError):
    """A checkpoint to resume from does not hold the variables of the model being trained."""


class Agreement:
    """Which workers SIGTERM reached, the same answer on every worker: called by all of them
    after each chunk. Alone (one process, however many replicas): this process's flag. Under
    MultiWorkerMirroredStrategy: each worker's flag at its place in a vector, summed over the
    workers (one all-reduce of a few numbers a chunk)."""

    def __init__(self, strategy: tf.distribute.Strategy | None = None):
        self.names, self._summed = [termination.ALONE], None
        resolver = getattr(strategy, "cluster_resolver", None)
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and resolver:
            spec = resolver.cluster_spec().as_dict()
            self.names = [f"{kind} {i}" if kind != "chief" else "the chief"
                          for kind in ("chief", "worker") for i in range(len(spec.get(kind, [])))]
            if len(self.names) > 1:
                mine = self.names.index("the chief" if resolver.task_type == "chief"
                                        else f"{resolver.task_type} {resolver.task_id}")
                self._summed = self._sum_over_workers(strategy, mine, len(self.names))

    @staticmethod
    def _sum_over_workers(strategy, mine: int, workers: int):
        local = strategy.num_replicas_in_sync // workers  # each worker's replicas add its flag

        @tf.function
        def summed(flag):
            vector = tf.one_hot(mine, workers) * flag / local
            return strategy.reduce(tf.distribute.ReduceOp.SUM,
                                   strategy.run(tf.identity, args=(vector,)), axis=None)

        return summed

    def __call__(self) -> list[str]:
        """The names of the workers SIGTERM reached ([]: none)."""
        if self._summed is None:
            return self.names[:1] if termination.requested() else []
        flags = self._summed(tf.constant(1.0 if termination.requested() else 0.0)).numpy()
        return [name for name, flag in zip(self.names, flags) if flag > 0.5]


def preempted_at(directory: str, step: int) -> list[str]:
    """The workers a SIGTERM reached when the checkpoint of `step` in `directory` was saved ([]:
    it was not saved after a SIGTERM, or before the file was written)."""
    path = os.path.join(directory, PREEMPTED_FILE)
    try:
        with tf.io.gfile.GFile(path) as handle:
            note = json.load(handle)
    except (tf.errors.NotFoundError, ValueError):
        return []
    return list(note.get("signalled", [])) if int(note.get("step", -1)) == step else []


class Controller:
    """Trains to `total_steps`, checkpointing and running actions between chunks.

    Unlike Orbit's, the step loop is given to `train`, not to the constructor: the constructor
    restores, and the loop's input pipeline needs `start_step` to skip what was trained.
    """

    def __init__(self, model: tf.keras.Model, optimizer: tf.keras.optimizers.Optimizer, *,
                 directory: str, total_steps: int, steps_per_execution: int,
                 checkpoint_every: int, actions: Sequence[actions_lib.Action] = (),
                 restore_from: str | None = None, strategy: tf.distribute.Strategy | None = None,
                 max_to_keep: int = 3, tracked=None):
        """Restores the latest checkpoint, if any, and sets `start_step`.

        Args:
          directory: where this process saves checkpoints.
          restore_from: where the latest checkpoint is read (default: `directory`); a
            multi-worker non-chief saves to a scratch directory but resumes from the chief's.
          actions: called as action(step, logs) after each chunk, in order (actions.py).
          strategy: decides how the workers agree on a SIGTERM (`Agreement`).
          tracked: {name: trackable} saved and restored with the model (early_stopping.py's
            best weights).
        """
        self.global_step = optimizer.iterations
        self.total_steps = total_steps
        self.steps_per_execution = max(steps_per_execution, 1)
        self.checkpoint_every = max(checkpoint_every, 1)
        self.actions = list(actions)
        self._make_manager = lambda: make_checkpoint_manager(
            model, optimizer, directory, self.checkpoint_every, max_to_keep, tracked)
        self.directory = directory
        self.unreadable: list[str] = []  # checkpoints passed over on restore
        self.manager = self._make_manager()
        self.start_step = self.restore_checkpoint(restore_from or directory)
        self.agree = Agreement(strategy)
        self.chief = strategy_lib.is_chief(strategy)

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    def restore_checkpoint(self, directory: str) -> int:
        """Restores the newest checkpoint in `directory` that reads whole, if there is one;
        returns the global step to start from (0 without one)."""
        unreadable = []
        for path in reversed(_listed_checkpoints(directory)):
            why = _unreadable(path)
            if why:
                unreadable.append(path)
                logging.warning("Checkpoint %s does not read (%s): trying the one before it",
                                path, why)
                continue
            self.unreadable = unreadable
            if unreadable and directory == self.directory:
                _forget(directory, unreadable)
                self.manager = self._make_manager()
            status = self.manager.checkpoint.restore(path)
            try:  # a checkpoint of other objects would restore some and leave the rest as drawn
                status.assert_existing_objects_matched()
            except AssertionError as err:
                raise CheckpointMismatch(
                    f"checkpoint {path} does not hold this job's variables (another model or "
                    f"layout of its tables): {str(err).splitlines()[0][:200]}") from None
            step = self.step
            logging.info("Resumed from %s at global step %d%s", path, step,
                         f" (passed over {len(unreadable)} unreadable)" if unreadable else "")
            return step
        self.unreadable = unreadable
        if unreadable:
            logging.warning("No checkpoint in %s reads: training from the start", directory)
            if directory == self.directory:
                _forget(directory, unreadable)
                self.manager = self._make_manager()
        return 0

    def _next_chunk(self, step: int) -> int:
        to_checkpoint = self.checkpoint_every - step % self.checkpoint_every
        return min(self.steps_per_execution, self.total_steps - step, to_checkpoint)

    def _count_interval_from(self, step: int) -> None:
        # The manager counts its interval from its last save or restore, and a fresh run has had
        # neither: it would save after the very first chunk. Every worker must save at the same
        # steps, and the non-chief's (scratch) manager never restored: count from the multiple of
        # checkpoint_every at or before the start step, on all of them.
        tf_internals.count_checkpoint_interval_from(self.manager,
                                                    step - step % self.checkpoint_every)

    def train(self, steps) -> dict[str, float]:
        """Runs `steps.train(n)` chunks (a step loop, trainer_module/loop.py) until `total_steps`;
        returns the last chunk's logs, with
        what the actions added ({} when there was nothing left to train)."""
        step = self.step
        self._count_interval_from(step)
        actions_lib.begin(self.actions, step)
        logs: dict = {}
        # Resumed from the checkpoint an action stopped training at (early stopping): no more.
        done = any(getattr(action, "stopped", lambda at: False)(step) for action in self.actions)
        with termination.checkpoint_on_sigterm():
            while not done and step < self.total_steps:
                logs = steps.train(self._next_chunk(step))
                step = self.step
                # Actions whose state is checkpointed (early stopping's best weights) act before
                # the save, so a resumed run has what they did at this step.
                for action in self.actions:
                    if getattr(action, "before_checkpoint", False):
                        action(step, logs)
                signalled = self.agree()
                if signalled:  # SIGTERM to any worker: every one saves here, whatever the interval
                    saved = self.manager.save(checkpoint_number=step, check_interval=False)
                    if self.chief:
                        with tf.io.gfile.GFile(os.path.join(self.directory, PREEMPTED_FILE),
                                               "w") as handle:
                            json.dump({"step": step, "signalled": signalled}, handle)
                    raise termination.Preempted(step, saved, signalled)
                # On a multiple of checkpoint_every (the interval check), and always at the end.
                self.manager.save(checkpoint_number=step, check_interval=step < self.total_steps)
                for action in self.actions:
                    if not getattr(action, "before_checkpoint", False):
                        action(step, logs)
                if logs.get(actions_lib.STOP_TRAINING):  # an action's word (early stopping)
                    self.manager.save(checkpoint_number=step, check_interval=False)
                    break
        actions_lib.end(self.actions, step, logs)
        return logs


def _listed_checkpoints(directory: str) -> list[str]:
    """The checkpoints the directory's state lists, oldest first ([] without one)."""
    state = tf.train.get_checkpoint_state(directory)
    return list(state.all_model_checkpoint_paths) if state else []


def _unreadable(path: str) -> str:
    """Why the checkpoint at `path` does not read whole ("" when it does): every tensor is read,
    so a file that is missing, truncated or fails its checksum is found before it is restored."""
    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as err:  # noqa: BLE001  the reader's errors vary: OpError, IndexError, ...
        lines = str(err).strip().splitlines()
        return f"{type(err).__name__}: {lines[0][:160] if lines else ''}"
    return ""


def _forget(directory: str, paths: list[str]) -> None:
    """Removes unreadable checkpoints' files and takes them out of the directory's state (the
    others keep their timestamps, by which the manager counts and sweeps them)."""
    for path in paths:
        for leftover in tf.io.gfile.glob(f"{path}.*"):
            tf.io.gfile.remove(leftover)
    state = tf.train.get_checkpoint_state(directory)
    kept = [(p, t) for p, t in zip(state.all_model_checkpoint_paths,
                                   state.all_model_checkpoint_timestamps) if p not in paths]
    if not kept:
        tf.io.gfile.remove(f"{directory.rstrip('/')}/checkpoint")
        return
    tf_internals.write_checkpoint_state(directory, kept[-1][0], [p for p, _ in kept],
                                        [t for _, t in kept], state.last_preserved_timestamp)
