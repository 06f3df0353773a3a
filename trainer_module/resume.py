"""Where a job resumes from: its own checkpoints, or those an interrupted attempt at the same job
left.

A job's identity (`job_key`) is a hash of what decides its weights: the inputs' URIs and every
setting (trainer_module/job.py), not where it writes. Two attempts with the same identity read the
same batches in the same order, so resuming one from the other's checkpoint ends with the weights
an uninterrupted run ends with.

- A retried Kubeflow task runs with the same executor input, so the same ModelRun directory: its
  own checkpoints are there.
- A run stopped by SIGTERM (runtime/termination.py) parks its checkpoints beside the ModelRun
  directories (`<parent>/.interrupted/<job key>`) before it exits, because TFX's local launcher
  removes a failed execution's outputs; the next run's Trainer, a new execution with a new ModelRun
  directory, resumes from there and removes them once it has trained to the end.
- A local run killed outright (SIGKILL, a lost machine) had no chance to park: each attempt leaves
  its identity in its ModelRun directory (JOB_KEY_FILE), so the next attempt finds the sibling
  directory of the same job that got furthest.
- A refit after early stopping (trainer_module/refit.py) is a job of its own, in REFIT under its
  first fit's ModelRun directory (job.REFIT): it parks beside the ModelRun directories too, its
  first fit's last checkpoint with it (`park_last`), and finds the refit of a sibling attempt. So
  does each member of a bag of refits (trainer_module/bag.py, in REFIT_<i>), the members before
  it parked with it.

Elastic resume: where the job runs (the replicas, hosts, TPU slice) is not part of its identity.
Each checkpoint records the topology it was written on (`TopologyState`, in the checkpoint itself:
a job's checkpoints may come from several topologies), and a job resumed on another replica count
keeps that checkpoint's global batch (scaling.make_plan's `keep`: accumulation on fewer
replicas, a smaller per-replica batch on more), so its learning rate, steps, schedule and place in
the input are the ones it started with.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from absl import logging
import tensorflow as tf

from trainer_module.job import REFIT, TrainJob
from trainer_module.scaling import Topology

JOB_KEY_FILE = "job_key"
CHECKPOINTS = "checkpoints"
PARKED = ".interrupted"


def checkpoint_dir(job: TrainJob) -> str:
    return os.path.join(job.model_run_dir, CHECKPOINTS)


def _attempt(job: TrainJob) -> tuple[str, str]:
    """(the attempt's ModelRun directory, the job's directory under it: "", REFIT's or a bag
    member's, REFIT_<i>: trainer_module/bag.py)."""
    run_dir = job.model_run_dir.rstrip("/")
    if os.path.basename(run_dir).startswith(REFIT):
        return os.path.dirname(run_dir), os.path.basename(run_dir)
    return run_dir, ""


# Where a job runs, not what it trains to: an attempt on another topology resumes the same job
# (its global batch kept from the checkpoint, scaling.make_plan's `keep`). accumulation_steps too:
# it is how a topology makes the global batch (replicas x per-replica batch x accumulation), and a
# fallback to fewer machines or a smaller slice raises it to keep the batch; a resumed job keeps
# its checkpoint's global batch whatever it says. ps_servers too: a table split over the
# parameter servers is checkpointed whole, early stopping's copy of it too, and restores on any
# number of them (tests/ps_tables.py); the workers stay in the key (asynchronous updates depend
# on how many workers send them).
TOPOLOGY_SETTINGS = ("emulate_replicas", "tpu", "tpu_zone", "tpu_project", "tpu_slice",
                     "allow_fallback", "fallback_slices", "gpu_machines", "gpu_machine_type",
                     "gpu_accelerator", "gpus_per_machine", "fallback_gpu_machines",
                     "accumulation_steps", "ps_servers")


def job_key(job: TrainJob) -> str:
    """What decides the weights a job trains to: its inputs and settings, not where it writes
    nor on how many replicas it runs."""
    trainer = dataclasses.replace(job.trainer, **{
        name: type(getattr(job.trainer, name))() for name in TOPOLOGY_SETTINGS})
    inputs = dataclasses.replace(job, model_run_dir="", serving_model_dir="",
                                 eval_files=()).with_trainer(trainer)
    return hashlib.sha256(inputs.to_json().encode()).hexdigest()[:32]


TOPOLOGY = "topology"  # the name of TopologyState in the checkpoint
_TOPOLOGY_KEY = f"{TOPOLOGY}/.ATTRIBUTES/py_state"


class TopologyState(tf.train.experimental.PythonState):
    """The topology a checkpoint is written on, saved in it (track it as TOPOLOGY): it saves
    `current`, and a restore leaves the checkpoint's in `restored` (None: no checkpoint restored,
    or one written before checkpoints recorded it)."""

    def __init__(self, current: Topology):
        self.current = current
        self.restored: Topology | None = None

    def serialize(self):
        return json.dumps(dataclasses.asdict(self.current))

    def deserialize(self, string_value):
        self.restored = _topology(string_value)


def _topology(raw) -> Topology:
    values = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    return Topology(**{f.name: int(values[f.name]) for f in dataclasses.fields(Topology)})


def recorded_topology(directory: str) -> Topology | None:
    """The topology the newest checkpoint in `directory` that records one was written on (None:
    no checkpoint, or none records it)."""
    state = tf.train.get_checkpoint_state(directory)
    for path in reversed(list(state.all_model_checkpoint_paths) if state else []):
        try:
            return _topology(tf.train.load_checkpoint(path).get_tensor(_TOPOLOGY_KEY))
        except Exception as err:  # noqa: BLE001  unreadable or older: the Controller says which
            logging.info("No topology read from %s (%s)", path, type(err).__name__)
    return None


def parked_dir(job: TrainJob) -> str:
    """Where an interrupted attempt at this job parks its checkpoints."""
    return os.path.join(os.path.dirname(_attempt(job)[0]), PARKED, job_key(job))


def mark(job: TrainJob) -> None:
    """Leaves the job's identity in its ModelRun directory (the chief, before training)."""
    tf.io.gfile.makedirs(job.model_run_dir)
    with tf.io.gfile.GFile(os.path.join(job.model_run_dir, JOB_KEY_FILE), "w") as handle:
        handle.write(job_key(job))


def park(job: TrainJob, checkpoint: str) -> str:
    """Moves the job's checkpoints out of its ModelRun directory, which a failed execution loses,
    to parked_dir (replacing what an earlier interruption parked); returns where `checkpoint` is
    now."""
    parked = parked_dir(job)
    if tf.io.gfile.exists(parked):
        tf.io.gfile.rmtree(parked)
    tf.io.gfile.makedirs(os.path.dirname(parked))
    # The manager's state file names the checkpoints relative to their directory: it moves too.
    tf.io.gfile.rename(checkpoint_dir(job), parked)
    return os.path.join(parked, os.path.basename(checkpoint))


def park_last(job: TrainJob) -> None:
    """Parks the job's checkpoints, where its ModelRun directory holds some: a first fit whose
    refit a SIGTERM stopped (trainer_module/refit.py), so that the next attempt resumes at its
    stop, on the topology it recorded, and its refit is the same job."""
    latest = tf.train.latest_checkpoint(checkpoint_dir(job)) if job.model_run_dir else None
    if latest:
        park(job, latest)


def finished(job: TrainJob) -> None:
    """The job trained to its end: what an interruption parked is no longer needed."""
    parked = parked_dir(job)
    if job.model_run_dir and tf.io.gfile.exists(parked):
        tf.io.gfile.rmtree(parked)


def restore_from(job: TrainJob) -> str:
    """The checkpoint directory to resume from: the job's own when it has a checkpoint, else what
    an interrupted attempt parked, else the sibling ModelRun directory of an attempt at the same
    job that got furthest, else the job's own (nothing to resume)."""
    own = checkpoint_dir(job)
    if tf.train.latest_checkpoint(own) or not job.model_run_dir:
        return own
    if tf.train.latest_checkpoint(parked_dir(job)):
        return parked_dir(job)
    (attempt, inner), key = _attempt(job), job_key(job)
    best, best_step = own, 0
    for sibling in tf.io.gfile.glob(os.path.join(os.path.dirname(attempt), "*", inner,
                                                 JOB_KEY_FILE)):
        run_dir = os.path.dirname(sibling)
        if run_dir.rstrip("/") == job.model_run_dir.rstrip("/"):
            continue
        with tf.io.gfile.GFile(sibling) as handle:
            if handle.read().strip() != key:
                continue
        latest = tf.train.latest_checkpoint(os.path.join(run_dir, CHECKPOINTS))
        step = int(latest.rsplit("-", 1)[1]) if latest else 0
        if step > best_step:
            best, best_step = os.path.join(run_dir, CHECKPOINTS), step
    return best
