"""A fit's model, optimizer and traced step, trained again by the fits after it in the same job:
the refit on every train row (trainer_module/refit.py) and a bag's members (trainer_module/bag.py).

Tracing the step (the model, its gradient, AdamW's update and the weights' average, in one
tf.function of steps_per_execution steps) is a large part of a small table's fixed cost, and a
refit traced it again: the same model, optimizer and global batch, with other initial weights
(the first fit's draw, or the next seed's for a bag's member), other rows, steps and decay (loans:
the refit's 2.2 s from its counting pass to its step 100 are 1.4 s without the trace;
docs/performance.md). So a refit takes the objects of the fit before it and sets them to what a
fresh build makes (`Kept.take`):

- the weights: the model is built again from the refit's seed (built, not traced: its
  initializers draw what a fresh fit's do) and its weights copied in; where a bag keeps the fit
  before as a member, its trained weights go to that new model, which takes its place;
- the optimizer's variables: as built (its step 0, its slots zero);
- the learning rate's decay: the schedule's `Horizon` variables (every synchronous schedule with
  a decay reads its end and length from them, `build.schedule`) set to the refit's, and the
  schedule's other numbers (rate, warmup) the refit's own: where they differ, nothing is taken;
- the weights' average: the new weights;
- the step loop: the refit's input, a new iterator of the same element spec, passed to the same
  traced function (`loop.SynchronousLoop.restart`).

The refit then makes a fresh build's updates (tests/test_refit.py: the bag served equals the mean
of two fits made alone, each a build of its own). Nothing is taken (the refit builds its own, as
before) for a model of the user's own, one with dropout or column dropout (its masks are keyed on
the optimizer's step, which the refit sets to 0, but no test holds a reused step with them
against a fresh build's), a table split over the replicas (a second build
would hold a second copy of it), a loss-scaled optimizer (its scale is state a build resets), an
asynchronous run (it has no refit), or a plan whose batch, rate or warmup differ.
"""

from __future__ import annotations

import dataclasses

from absl import logging
import tensorflow as tf

from trainer_module import loop, model as model_lib, precision, scaling, warmup

TAKEN = "The fit before's model, optimizer and traced step, set as built: not traced again"


@dataclasses.dataclass
class Fitted:
    """What a fit trained with: the objects its traced step holds."""

    model: tf.keras.Model
    optimizer: tf.keras.optimizers.Optimizer
    schedule: warmup.WarmupSchedule
    average: object  # weight_average.WeightAverage or None
    metrics: dict
    steps: loop.SynchronousLoop


def plan_key(plan: scaling.Plan) -> tuple:
    """The plan's numbers a traced step holds as constants (its batch and replicas, the rate and
    warmup of its schedule), and whether the schedule decays (reads the Horizon)."""
    return (plan.global_batch, plan.per_replica_batch, plan.accumulation_steps, plan.replicas,
            plan.learning_rate, plan.warmup_steps, plan.decay_steps > 0)


def reusable(cfg, model: tf.keras.Model, optimizer, asynchronous: bool) -> bool:
    """Whether a fit's objects may be trained again by a refit (the module's docstring): the
    built-in model without dropout (or column_dropout) or a split table, AdamW (or Adam)
    unscaled, synchronous."""
    return (not asynchronous and not cfg.model and not cfg.dropout and not cfg.column_dropout
            and not model_lib.sharded_parts(model)[1] and not precision.loss_scaled(optimizer))


class Kept:
    """The last fit's objects, for the next fit of the job (`take`)."""

    def __init__(self):
        self.fitted: Fitted | None = None
        self.key: tuple | None = None  # the plan_key of the fit kept

    def keep(self, cfg, plan: scaling.Plan, asynchronous: bool, fitted: Fitted) -> None:
        """A fit's objects, kept for the next fit where they are `reusable` (else none)."""
        reused = reusable(cfg, fitted.model, fitted.optimizer, asynchronous)
        self.fitted, self.key = (fitted, plan_key(plan)) if reused else (None, None)

    def take(self, plan: scaling.Plan, fresh: tf.keras.Model, models: list | None) -> Fitted | None:
        """The last fit's objects set to a fresh fit's state for `plan` (None: nothing kept, or
        a plan they do not fit). fresh: the model built for this fit, in the strategy's scope;
        where the last fit's model is among `models` (a bag's members before this one), fresh
        gets its trained weights and takes its place there. Call in the strategy's scope."""
        fitted, self.fitted = self.fitted, None
        if fitted is None or self.key != plan_key(plan):
            return None
        initial = fresh.get_weights()
        for i, member in enumerate(models or []):
            if member is fitted.model:  # a bag's member: its weights kept in `fresh`
                fresh.set_weights(fitted.model.get_weights())
                models[i] = fresh
        fitted.model.set_weights(initial)
        for variable in fitted.optimizer.variables:
            variable.assign(tf.zeros_like(variable))
        horizon = fitted.schedule.horizon
        if horizon is not None:
            horizon.planned = plan.train_steps
            horizon.end.assign(plan.train_steps)
            horizon.decay.assign(plan.decay_steps)
        fitted.schedule.total_steps, fitted.schedule.decay_steps = (plan.train_steps,
                                                                    plan.decay_steps)
        if fitted.average is not None:
            fitted.average.reset()
        logging.info(TAKEN)
        return fitted
