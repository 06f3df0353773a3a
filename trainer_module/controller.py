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
sets logs[STOP_TRAINING] (early stopping) ends training there, with a checkpoint. On multi-worker and TPU
strategies each chunk runs inside a tf.distribute PreemptionCheckpointHandler, which saves and
exits when the machine is about to be taken away; on one machine SIGTERM does the same
(trainer_module/termination.py): the chunk ends, a checkpoint is saved at its step, and
termination.Preempted is raised.

A checkpoint that does not read whole (a truncated or corrupt file, a file gone) is passed over
for the one before it, with a line saying so; in the Controller's own directory the bad one is
removed, so the manager's count of checkpoints holds only readable ones.
"""

from __future__ import annotations

from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from trainer_module import actions as actions_lib, termination

# Runs train_fn(num_steps) and returns its logs: plain, or inside a PreemptionCheckpointHandler.
StepRunner = Callable[[Callable[[int], dict], int], dict]


def make_checkpoint_manager(model, optimizer, directory: str, checkpoint_every: int,
                            max_to_keep: int = 3, tracked=None) -> tf.train.CheckpointManager:
    """The model and optimizer's checkpoints in `directory` (and `tracked`, {name: trackable},
    saved with them), at most one per `checkpoint_every` steps of `optimizer.iterations` (with
    `save(check_interval=True)`)."""
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **(tracked or {}))
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                      step_counter=optimizer.iterations,
                                      checkpoint_interval=max(checkpoint_every, 1))


def _run_plain(train_fn: Callable[[int], dict], num_steps: int) -> dict:
    return train_fn(num_steps)


def preemption_runner(strategy: tf.distribute.Strategy | None, manager: tf.train.CheckpointManager,
                      step_counter: tf.Variable) -> StepRunner | None:
    """`handler.run` of a PreemptionCheckpointHandler for the strategies whose machines can be
    preempted (multi-worker, TPU); None for the others. Its save is named by the global step and
    skips the interval check: a preemption cannot wait for the next multiple."""
    if not isinstance(strategy, (tf.distribute.MultiWorkerMirroredStrategy,
                                 tf.distribute.TPUStrategy)):
        return None
    config = tf.distribute.experimental.TerminationConfig(save_fn=lambda: manager.save(
        checkpoint_number=int(step_counter.numpy()), check_interval=False))
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, manager, termination_config=config)
    return handler.run


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
          strategy: decides whether chunks run under a PreemptionCheckpointHandler.
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
        self.run_steps: StepRunner = (
            preemption_runner(strategy, self.manager, self.global_step) or _run_plain)

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
            self.manager.checkpoint.restore(path)
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
        self.manager._last_checkpoint_step = step - step % self.checkpoint_every  # noqa: SLF001

    def train(self, steps) -> dict[str, float]:
        """Runs `steps.train(n)` chunks (a step loop, trainer_module/loop.py) until `total_steps`;
        returns the last chunk's logs, with
        what the actions added ({} when there was nothing left to train)."""
        step = self.step
        self._count_interval_from(step)
        actions_lib.begin(self.actions, step)
        logs: dict = {}
        with termination.checkpoint_on_sigterm():
            while step < self.total_steps:
                logs = self.run_steps(steps.train, self._next_chunk(step))
                step = self.step
                # Actions whose state is checkpointed (early stopping's best weights) act before
                # the save, so a resumed run has what they did at this step.
                for action in self.actions:
                    if getattr(action, "before_checkpoint", False):
                        action(step, logs)
                if termination.requested():  # SIGTERM: save here, whatever the interval
                    saved = self.manager.save(checkpoint_number=step, check_interval=False)
                    raise termination.Preempted(step, saved)
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
    from tensorflow.python.checkpoint import checkpoint_management

    for path in paths:
        for leftover in tf.io.gfile.glob(f"{path}.*"):
            tf.io.gfile.remove(leftover)
    state = tf.train.get_checkpoint_state(directory)
    kept = [(p, t) for p, t in zip(state.all_model_checkpoint_paths,
                                   state.all_model_checkpoint_timestamps) if p not in paths]
    if not kept:
        tf.io.gfile.remove(f"{directory.rstrip('/')}/checkpoint")
        return
    checkpoint_management.update_checkpoint_state_internal(
        directory, kept[-1][0], all_model_checkpoint_paths=[p for p, _ in kept],
        all_model_checkpoint_timestamps=[t for _, t in kept],
        last_preserved_timestamp=state.last_preserved_timestamp)
