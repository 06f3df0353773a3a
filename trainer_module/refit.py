"""The refit after early stopping: the validation rows said how long to train; a second fit from
the start, on every row of the train split (the validation rows with the fit rows), trains that
long and is the model exported, as AutoGluon's refit_full does. The boosters a user compares
with fit on every row they are given; the first fit saw nine tenths of them.

How long: the kept weights' epochs of the fit rows, in steps of the same global batch over the
train split's rows (`steps`). Their schedule is the first fit's: warmup, the flat rate for the
epochs of the step the decay started from, then the decay to zero over as many epochs as the
first fit's (a cooldown, or the planned decay), to its end. Weights kept at the flat rate (the
first fit's cooldown, scored on its validation rows, did not beat them) are refit for their
epochs at the flat rate, then the cooldown that started from them (trainer.decay_share of the
run and it): the refit ends decayed, as every planned run does, and not at the full rate (a
table of 3,700 rows: ISLR Caravan, see docs/training.md). The same seed draws the same initial
weights; the loop, the all-reduce and the weights' average are the first fit's, so N replicas
still make one device's update.

The refit is a job of its own (`job`): its settings fix its steps, batch and decay; its
checkpoints are under the first fit's ModelRun directory (job.REFIT), parked beside the ModelRun
directories and resumed as any job's (trainer_module/resume.py). A SIGTERM in the refit parks
the first fit's last checkpoint too (trainer_module/train.py): the next attempt resumes the first
fit at its stop, on the global batch it recorded, trains it no further, and so makes the same
refit job, which resumes from its own checkpoint.

A bag: on a train split of trainer.bag_min_rows to bag_rows rows, the built-in model's refit is
made trainer.bags times, each from the next seed, and the mean of the models is exported
(`members`, trainer_module/bag.py); a model of the user's own is refit once.

No refit: a train split of more than trainer.refit_rows rows (0: none refit), no validation
rows, an asynchronous run (it has no cooldown to follow), weights kept at step 0, no rows
beyond the fit rows, or kept weights whose validation loss no score could beat by the least gain
that counts (trainer_module/least_gain.py, `unbeatable`: below 1e-4): a model that predicts the
rows it never fit that well has nothing left to learn from them, and the refit would cost a
second fit for the same figures (openintro's loans: its first fit stops at a validation loss of
3.6e-05, and the refit on every row was 1,115 steps more, longer than the first fit's 800; the
same held-out accuracy, 1.0000). The summary says so (`Stopping.unbeatable`)."""

from __future__ import annotations

import dataclasses
import math
import os

from trainer_module.job import REFIT, TrainJob
from trainer_module.scaling import Plan, cooldown_steps
from trainer_module.summary import Refit, Stopping, TrainingSummary


def steps(stopping: Stopping | None, plan: Plan, rows: int,
          share: float = 0.0) -> tuple[int, int] | None:
    """(steps, decay steps) of the refit on `rows`, from the first fit's account; None where
    there is nothing to refit (see the module's docstring). share: trainer.decay_share, the
    cooldown's of weights kept at the flat rate."""
    if (stopping is None or stopping.best_step <= 0 or not stopping.fit_rows
            or rows <= stopping.fit_rows or stopping.unbeatable()):
        return None
    ratio = rows / stopping.fit_rows
    if stopping.cooled_from and stopping.best_step > stopping.cooled_from:
        if stopping.cooled_best < 0 or stopping.cooled_over <= 0:  # unknown: no guess
            return None
        # The cooldown's length, where the rate reached zero (a stop's chunk may end past it).
        flat, decay = stopping.cooled_best, stopping.cooled_over
    elif plan.decay_steps and stopping.best_step > plan.train_steps - plan.decay_steps:
        flat, decay = plan.train_steps - plan.decay_steps, plan.decay_steps  # the planned decay
    else:  # kept before any decay: the flat rate's epochs, then the cooldown from there
        flat = stopping.best_step
        decay = cooldown_steps(flat, share)
    decay = math.ceil(decay * ratio)
    return math.ceil(flat * ratio) + decay, decay


def job(first: TrainJob, plan: Plan, stopping: Stopping | None, rows: int | None,
        asynchronous: bool = False) -> TrainJob | None:
    """The refit's TrainJob (None: no refit): every row of the train split, a fixed number of
    steps of the first fit's global batch, its decay, under the first fit's ModelRun
    directory."""
    cfg = first.trainer
    if asynchronous or cfg.validation_share <= 0 or not rows or rows > cfg.refit_rows:
        return None
    planned = steps(stopping, plan, rows, cfg.decay_share)
    if planned is None:
        return None
    total, decay = planned
    trainer = dataclasses.replace(
        cfg, validation_share=0.0, train_steps=total, train_examples=0,
        decay_share=decay / total, global_batch=plan.global_batch, per_replica_batch=0,
        accumulation_steps=plan.accumulation_steps, verify=False, refit_rows=0)
    run_dir = os.path.join(first.model_run_dir, REFIT) if first.model_run_dir else ""
    return dataclasses.replace(first, model_run_dir=run_dir).with_trainer(trainer)


def merged(first: TrainingSummary, refitted: list[TrainingSummary], rows: int,
           seed: int) -> TrainingSummary:
    """The job's summary: the first fit's plan, logs and stopping, the eval figures of the
    model exported (the last refit's: a bag's mean, trainer_module/bag.py), and the refits'
    account (`Refit`). seed: the first refit's (a bag's members: the seeds after it)."""
    seconds = sum(each.train_seconds for each in refitted)
    last = refitted[-1]
    return dataclasses.replace(
        first, eval=last.eval, train_seconds=first.train_seconds + seconds,
        refit=Refit(steps=last.plan.train_steps, decay_steps=last.plan.decay_steps, rows=rows,
                    seconds=seconds, resumed_at=next(  # the member a SIGTERM stopped
                        (each.resumed_at for each in reversed(refitted) if each.resumed_at), 0),
                    bagged=len(refitted), seed=seed))


def members(again: TrainJob, rows: int) -> list[TrainJob]:
    """The refit's jobs, a bag's members (trainer_module/bag.py): the refit `again`, and where
    the built-in model's train split has trainer.bag_min_rows to bag_rows rows, trainer.bags - 1
    more, each from the next seed, in a directory of its own (`member_dir`). A model of the
    user's own (trainer.model) is refit once: the model served is the one their code builds."""
    cfg = again.trainer
    count = cfg.bags if not cfg.model and cfg.bag_min_rows <= rows <= cfg.bag_rows else 1
    return [again] + [
        dataclasses.replace(again, model_run_dir=member_dir(again.model_run_dir, i)).with_trainer(
            dataclasses.replace(cfg, seed=cfg.seed + i)) for i in range(1, count)]


def member_dir(refit_dir: str, index: int) -> str:
    """The directory of the bag's member `index` (1, 2, ...; the first is the refit's own,
    REFIT), beside the refit's: REFIT_<index> ("" where the refit has none)."""
    if not refit_dir:
        return ""
    return os.path.join(os.path.dirname(refit_dir.rstrip("/")), f"{REFIT}_{index}")
