"""trainer_module/resume.py: a job resumes from its own checkpoints, else from the earlier
attempt at the same job (a sibling ModelRun directory with its key) that got furthest, never
from another job's."""

import dataclasses

import tensorflow as tf

from trainer_module import resume
from trainer_module.job import TrainJob
from trainer_module.settings import CLASSIFICATION, TrainerConfig
from trainer_module.custom_config import TrainSpec


def _job(run_dir, **trainer) -> TrainJob:
    return TrainJob(train_files=["/data/Split-train/*"], eval_files=[], transform_dir="/tf/7",
                    model_run_dir=str(run_dir), serving_model_dir=str(run_dir / "model"),
                    spec=TrainSpec("y", CLASSIFICATION, TrainerConfig(**trainer)))


def _attempt(job: TrainJob, steps: list[int]) -> None:
    resume.mark(job)
    step = tf.Variable(0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step),
                                         resume.checkpoint_dir(job), max_to_keep=None)
    for number in steps:
        manager.save(checkpoint_number=number)


def test_an_attempt_resumes_from_the_furthest_earlier_attempt_at_the_same_job(tmp_path):
    runs = tmp_path / "Trainer" / "model_run"
    job = _job(runs / "9", train_steps=400)
    assert resume.restore_from(job) == resume.checkpoint_dir(job)  # nothing earlier
    _attempt(_job(runs / "4", train_steps=400), [100])
    _attempt(_job(runs / "6", train_steps=400), [100, 200, 250])
    _attempt(_job(runs / "7", train_steps=500), [100, 200, 300, 400])  # another job: other steps
    assert resume.restore_from(job) == str(runs / "6" / "checkpoints")
    # The key ignores where a job writes, not what it reads or how it trains.
    moved = dataclasses.replace(job, model_run_dir=str(runs / "10"), eval_files=("/e/*",))
    assert resume.job_key(moved) == resume.job_key(job)
    assert resume.job_key(dataclasses.replace(job, transform_dir="/tf/8")) != resume.job_key(job)
    # Nor where it runs: an attempt on another topology resumes the same job (elastic resume),
    # with the accumulation that keeps its global batch there (a fallback to fewer machines).
    elsewhere = job.with_trainer(dataclasses.replace(
        job.trainer, emulate_replicas=4, tpu_slice="v5e-8", tpu="local"))
    assert resume.job_key(elsewhere) == resume.job_key(job)
    fallback = job.with_trainer(dataclasses.replace(job.trainer, gpu_machines=2,
                                                    accumulation_steps=2))
    assert resume.job_key(fallback) == resume.job_key(job)
    slice_fallback = job.with_trainer(dataclasses.replace(  # v5e-16 -> v5e-8, accumulation 2
        job.trainer, tpu_slice="v5e-8", fallback_slices=["v5e-8"], accumulation_steps=2))
    assert resume.job_key(slice_fallback) == resume.job_key(job)
    servers = job.with_trainer(dataclasses.replace(job.trainer, ps_servers=3))
    assert resume.job_key(servers) == resume.job_key(job)  # the tables restore on any number
    assert resume.job_key(job.with_trainer(dataclasses.replace(
        job.trainer, ps_workers=4))) != resume.job_key(job)  # asynchronous: other updates
    assert resume.job_key(job.with_trainer(dataclasses.replace(
        job.trainer, per_replica_batch=64))) != resume.job_key(job)
    # What an attempt stopped by SIGTERM parked comes before the siblings (TFX removes a failed
    # execution's ModelRun directory); the state file moves with it.
    stopped = _job(runs / "8", train_steps=400)
    _attempt(stopped, [100, 120])
    moved = resume.park(stopped, f"{resume.checkpoint_dir(stopped)}/ckpt-120")
    assert moved == f"{resume.parked_dir(stopped)}/ckpt-120"
    assert not (runs / "8" / "checkpoints").exists()
    assert resume.restore_from(job) == resume.parked_dir(job)
    assert tf.train.latest_checkpoint(resume.parked_dir(job)) == moved
    # The fallback job (2 machines, accumulation 2) finds what the SIGTERMed attempt parked.
    fallback = dataclasses.replace(fallback, model_run_dir=str(runs / "11"))
    assert resume.restore_from(fallback) == resume.parked_dir(job)
    # Its own checkpoints come first: a retried task (the same ModelRun directory).
    _attempt(job, [50])
    assert resume.restore_from(job) == resume.checkpoint_dir(job)
    resume.finished(job)
    assert not tf.io.gfile.exists(resume.parked_dir(job))


def test_a_refit_parks_beside_the_model_run_directories_and_finds_a_sibling_attempts_refit(
        tmp_path):
    """A refit (trainer_module/refit.py) writes under its first fit's ModelRun directory, which
    TFX removes when the execution fails: it parks beside the ModelRun directories, as a first
    fit does, and a later attempt's refit finds the refit of an attempt killed outright."""
    from trainer_module.job import REFIT

    runs = tmp_path / "Trainer" / "model_run"
    refit = _job(runs / "9" / REFIT, train_steps=557, validation_share=0.0)
    assert resume.parked_dir(refit).startswith(str(runs / resume.PARKED) + "/")
    assert resume.parked_dir(refit) != resume.parked_dir(_job(runs / "9", train_steps=400))
    assert resume.restore_from(refit) == resume.checkpoint_dir(refit)  # nothing earlier
    _attempt(_job(runs / "6" / REFIT, train_steps=557, validation_share=0.0), [100, 200])
    _attempt(_job(runs / "7", train_steps=557, validation_share=0.0), [300])  # not a refit's
    assert resume.restore_from(refit) == str(runs / "6" / REFIT / "checkpoints")
    stopped = _job(runs / "8" / REFIT, train_steps=557, validation_share=0.0)
    _attempt(stopped, [250])
    resume.park(stopped, f"{resume.checkpoint_dir(stopped)}/ckpt-250")
    assert resume.restore_from(refit) == resume.parked_dir(refit)
