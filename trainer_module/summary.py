"""What a training run leaves behind, typed: its TrainingSummary (training_summary.json in the
model run, written by trainer_module/run_fn.py, read back by the run report), with the scaling plan
it followed, the final train and eval figures, trainer.verify's Verification and a
parameter-server run's Asynchronous figures.

Light on purpose (no TensorFlow): the report and `lockstep runs` read summaries of past runs. A
summary written by another version reads back with defaults for what it lacks; keys this
version does not know are ignored.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from runtime import termination
from trainer_module.least_gain import MIN_DELTA, unbeatable
from trainer_module.scaling import UNCOMPILED_WHY, Plan
from trainer_module.table_plan import Table

SUMMARY_FILE = "training_summary.json"

_CAUSES = ("a loss averaged over one replica's batch, per-replica BatchNormalization statistics, "
           "per-replica randomness")


def _known(cls, values: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


@dataclasses.dataclass(frozen=True)
class Verification:
    """What `verify` found: the setting, then the largest weight difference between the
    replicas and one device (in `variable`) against the reference's largest movement."""

    replicas: int
    steps: int
    per_replica_batch: int
    global_batch: int
    learning_rate: float
    max_difference: float
    variable: str
    moved: float
    tolerance: float
    passed: bool
    updates: int = -1  # the optimizer's updates on the replicas' side (must equal steps)
    accumulation_steps: int = 1
    precision: str = "float32"
    jit_compile: bool = False
    # trainer.jit_compile asked for, and not used on its CPU replicas (scaling.UNCOMPILED)
    uncompiled: bool = False
    workers: int = 1
    # float32 rounding allowed beside tolerance x moved (trainer_module/equivalence.py): a few
    # float32 steps of the differing weights; 0 where the weights moved too little for it
    rounding: float = 0.0
    # The features whose tables were split over the replicas (trainer_module/sharded_embedding.py)
    sharded_tables: tuple[str, ...] = ()
    optimizer: str = "SGD"  # verify's, or the run's (AdamW: trainer_module/equivalence.py)

    @property
    def relative(self) -> float:
        """The largest difference as a fraction of the largest movement."""
        if self.moved > 0:
            return self.max_difference / self.moved
        return 0.0 if self.max_difference == 0 else math.inf

    def to_dict(self) -> dict:
        """The fields, and `relative`, as JSON-ready values."""
        return {**dataclasses.asdict(self), "relative": self.relative}

    @classmethod
    def from_dict(cls, d: dict) -> "Verification":
        values = _known(cls, d)  # `relative` is derived
        values["sharded_tables"] = tuple(values.get("sharded_tables") or ())
        return cls(**values)

    def lines(self) -> list[str]:
        """What to print: the setting, then the verdict."""
        where = (f" in {self.workers} worker processes" if self.workers > 1 else "")
        accumulated = (f" x {self.accumulation_steps} accumulated"
                       if self.accumulation_steps > 1 else "")
        extras = "".join([f", {self.precision}" if self.precision != "float32" else "",
                          ", XLA" if self.jit_compile else "",
                          f", no XLA ({UNCOMPILED_WHY})" if self.uncompiled else "",
                          f", tables split over the replicas: {', '.join(self.sharded_tables)}"
                          if self.sharded_tables else ""])
        setting = (f"verify: {self.replicas} replicas{where} x batch {self.per_replica_batch}"
                   f"{accumulated} = global batch {self.global_batch}, {self.steps} {self.optimizer} steps at "
                   f"learning rate {self.learning_rate:g}{extras}")
        if self.updates not in (-1, self.steps):
            return [setting, f"verify: the optimizer made {self.updates} updates in {self.steps} "
                             "global steps, not one per step: the replicas do NOT make one "
                             "device's update"]
        if self.moved <= 0:
            return [setting, "verify: the weights did not move (learning rate 0?), so there is "
                             "nothing to compare: not verified"]
        found = (f"verify: largest weight difference {self.max_difference:.1e} ({self.variable}), "
                 f"weights moved {self.moved:.1e}: {self.relative:.1e} of the movement, ")
        if self.passed:
            rounded = (f" with float32 rounding ({self.rounding:.1e}, {self.steps + 1} float32 "
                       "steps of its weights)"
                       if self.max_difference > self.tolerance * self.moved else "")
            verdict = (f"within {self.tolerance:.0e}{rounded}: {self.replicas} replicas make the "
                       "update one device makes on the global batch")
        else:
            verdict = (f"beyond {self.tolerance:.0e}: the replicas do NOT make one device's "
                       f"update; look at {self.variable} ({_CAUSES})")
        return [setting, found + verdict]


@dataclasses.dataclass(frozen=True)
class Asynchronous:
    """A parameter-server run (trainer_module/parameter_server.py): its cluster, the updates
    applied, and the staleness measured: how many updates by other workers came between a
    worker's read of the weights and its own update."""

    workers: int
    parameter_servers: int
    updates: int
    staleness_mean: float
    staleness_max: int


@dataclasses.dataclass(frozen=True)
class Stopping:
    """Early stopping (trainer_module/early_stopping.py): the step training stopped at, the step
    whose weights were kept, its validation loss and rows, the steps of an epoch of the fit
    rows, the steps between scores, and whether it stopped before the planned steps."""

    stopped_at: int
    best_step: int
    validation_loss: float
    validation_rows: int
    steps_per_epoch: int = 0
    every: int = 0
    stopped_early: bool = False
    settled: bool = False  # stopped because the best was too near zero for a new best to count
    cooled_from: int = 0  # the step validation stopped improving and the cooldown began (0: none)
    fit_rows: int = 0  # the train split's rows less the validation rows (0: not recorded)
    global_batch: int = 0
    averaged: float = 0.0  # the weights' average's momentum at the kept step (0: none)
    cooled_best: int = -1  # the step whose weights the cooldown started from (-1: none recorded)
    cooled_over: int = 0  # the cooldown's steps, where the rate reached zero (0: none)

    def unbeatable(self) -> bool:
        """Whether the kept weights' validation loss is so near zero that no score could beat
        it by the least gain that counts (trainer_module/least_gain.py): then no refit follows
        (trainer_module/refit.py)."""
        return unbeatable(self.validation_loss)

    def no_refit_words(self) -> str:
        """Why no refit follows where the kept weights leave nothing to gain ("" otherwise):
        'none: the validation rows are predicted within the least gain that counts (loss
        3.579e-05, below 0.0001): the first fit's model exported'."""
        if not self.unbeatable():
            return ""
        return ("none: the validation rows are predicted within the least gain that counts "
                f"(loss {self.validation_loss:.4g}, below {MIN_DELTA:g}): the first fit's model "
                "exported")

    def epochs(self, step: int) -> str:
        """" (epoch 2.8)": the fit rows' passes `step` steps make (by the global batch and the
        fit rows where they were recorded, else by the steps of an epoch)."""
        if self.fit_rows and self.global_batch:
            return f" (epoch {step * self.global_batch / self.fit_rows:.1f})"
        return f" (epoch {step / self.steps_per_epoch:.1f})" if self.steps_per_epoch else ""

    def words(self, planned: int) -> str:
        """'stopped early at step 900 (epoch 4.2) of 2,000, kept step 600 (epoch 2.8): validation
        loss 0.0412 on 4,310 rows held out of the train split'; with a cooldown, 'validation
        stopped improving at step 700 (epoch 3.3), the rate decayed to zero over 180 steps from
        there: stopped at step 880 ...'; the kept weights an average, 'kept step 600 (epoch 2.8),
        the weights' average over about 100 steps: ...'."""
        at = f"step {self.stopped_at:,}{self.epochs(self.stopped_at)} of {planned:,}"
        if self.cooled_from:
            ran = (f"validation stopped improving at step {self.cooled_from:,}"
                   f"{self.epochs(self.cooled_from)}, the rate decayed to zero over "
                   f"{self.stopped_at - self.cooled_from:,} steps from there: stopped at {at}")
        elif self.stopped_early:
            ran = f"stopped early at {at}"
        else:
            ran = f"ran all {self.stopped_at:,} steps{self.epochs(self.stopped_at)}"
        settled = ("; no later score could beat it by the least gain that counts"
                   if self.settled else "")
        average = (f", the weights' average over about {round(1 / (1 - self.averaged)):,} steps"
                   if self.averaged else "")
        return (f"{ran}, kept step {self.best_step:,}{self.epochs(self.best_step)}{average}: "
                f"validation loss {self.validation_loss:.4g} on {self.validation_rows:,} rows "
                f"held out of the train split{settled}")

    def seen_words(self) -> str:
        """'trained on 1,228,800 examples: 0.4 epochs of 3,030,000 fit rows; stopped when
        validation stopped improving' ("" where the rows were not recorded)."""
        if not (self.fit_rows and self.global_batch):
            return ""
        examples = self.stopped_at * self.global_batch
        epochs = examples / self.fit_rows
        why = ("stopped when validation stopped improving" if self.stopped_early else
               "the planned steps ran out first")
        return (f"trained on {examples:,} examples: {epochs:.{2 if epochs < 1 else 1}f} epochs of "
                f"{self.fit_rows:,} fit rows; {why}")


@dataclasses.dataclass(frozen=True)
class Refit:
    """The second fit after early stopping (trainer_module/refit.py): on every row of the train
    split, for the kept weights' epochs of the fit rows, the model it ends with exported."""

    steps: int
    decay_steps: int
    rows: int
    seconds: float = 0.0
    resumed_at: int = 0
    bagged: int = 1  # refits from seeds seed, seed + 1, ...: their mean exported (bag.py)
    seed: int = 0

    def words(self) -> str:
        """'on all 34,511 rows of the train split for 830 steps, the rate decayed to zero
        over the last 170 (the kept weights' epochs of the fit rows): the model exported'; a
        bag's: '... (...), from seeds 42 and 43, 2.1 s: the mean of the 2 models exported'."""
        decay = (f", the rate decayed to zero over the last {self.decay_steps:,}"
                 if self.decay_steps else "")
        resumed = f", resumed at step {self.resumed_at:,}" if self.resumed_at else ""
        seeds = [str(self.seed + i) for i in range(self.bagged)]
        bag = (f", from seeds {', '.join(seeds[:-1])} and {seeds[-1]}"
               if self.bagged > 1 else "")
        exported = (f"the mean of the {self.bagged} models exported" if self.bagged > 1
                    else "the model exported")
        return (f"on all {self.rows:,} rows of the train split for {self.steps:,} steps"
                f"{decay} (the kept weights' epochs of the fit rows){resumed}{bag}, "
                f"{self.seconds:.1f} s: {exported}")


@dataclasses.dataclass(frozen=True)
class Elastic:
    """A job resumed on another topology than the one its checkpoint was written on
    (trainer_module/resume.py): the step, the replicas then and now, and the accumulation that
    keeps the checkpoint's global batch (and so its learning rate, steps and schedule)."""

    step: int
    replicas: int
    was_replicas: int
    accumulation_steps: int
    was_accumulation_steps: int
    global_batch: int
    per_replica_batch: int = 0
    hosts: int = 1
    was_hosts: int = 1
    # False: the examples of each step from here are not those the old topology would have
    # read (several hosts each reading a share of the files, and their count changed).
    same_examples: bool = True
    # Why the weights may not be those of an uninterrupted run (batch statistics per
    # micro-batch); "" when they are.
    caveat: str = ""

    def words(self) -> str:
        """'resumed at step 12 on 4 replicas (was 8): accumulation 2 keeps global batch 256'."""
        text = (f"resumed at step {self.step} on {self.replicas} replicas (was "
                f"{self.was_replicas}): accumulation {self.accumulation_steps} keeps global "
                f"batch {self.global_batch}")
        if not self.same_examples:
            text += (f"; the examples of each step from here are not those {self.was_hosts} "
                     "hosts would have read (trainer.input_order = \"global\" keeps them)")
        return text + (f"; {self.caveat}" if self.caveat else "")


@dataclasses.dataclass(frozen=True)
class TrainingSummary:
    """One training run: the plan it followed, its last train logs, its eval figures, where it
    ran, and what the user's code and trainer.verify had to do with it."""

    plan: Plan
    train: dict[str, float]
    eval: dict[str, float]
    strategy: str  # the tf.distribute strategy as users know it (strategy.name)
    replicas: int
    chief: bool = True
    train_seconds: float = 0.0
    warm_started: bool = False
    not_warm_started: str = ""  # trainer.warm_start asked, and why it did not (another model)
    base_model: str = ""
    model: str = ""  # the user's model hook ("": the built-in one)
    loss: str = ""
    verify: Verification | None = None
    asynchronous: Asynchronous | None = None
    # Resumed from a checkpoint at this step (0: trained from the start), passing over these
    # checkpoints, which did not read (trainer_module/controller.py).
    resumed_at: int = 0
    unreadable_checkpoints: tuple[str, ...] = ()
    stopping: Stopping | None = None  # early stopping's account (None: trained every step)
    refit: Refit | None = None  # the fit on every train row after early stopping (None: none)
    elastic: Elastic | None = None  # resumed on another topology (None: the same, or not resumed)
    # What the loop read (trainer_module/input_pipeline.py, fingerprint): equal fingerprints, the
    # same rows in the same order and the same validation part ("": not recorded).
    input_fingerprint: str = ""
    # The embedding tables split by rows over the replicas (trainer_module/sharded_embedding.py).
    sharded_tables: tuple[Table, ...] = ()
    # Resumed from a checkpoint saved after a SIGTERM reached these workers (trainer_module/
    # controller.py, Agreement): every worker saved at resumed_at.
    preempted: tuple[str, ...] = ()

    def resume_words(self) -> str:
        """The resume's line: 'resumed at step S' and, after a SIGTERM, '(every worker saved at S
        after a SIGTERM to worker 2)'; on another topology, 'on M replicas (was N): accumulation
        K keeps global batch G'. "" when neither."""
        if not self.preempted:
            return self.elastic.words() if self.elastic else ""
        several = self.preempted != (termination.ALONE,)
        why = (f" (every worker saved at {self.resumed_at} after a SIGTERM to "
               f"{', '.join(self.preempted)})" if several else
               " (saved there after a SIGTERM)")
        head = f"resumed at step {self.resumed_at}"
        if self.elastic:
            return head + why + self.elastic.words().removeprefix(head)
        return head + why

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: plain values, the nested records as dicts."""
        values = dataclasses.asdict(self)
        values["verify"] = self.verify.to_dict() if self.verify else None
        values["plan"]["warnings"] = list(self.plan.warnings)
        values["unreadable_checkpoints"] = list(self.unreadable_checkpoints)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainingSummary":
        values = _known(cls, values)
        plan = _known(Plan, values.get("plan") or {})
        plan["warnings"] = tuple(plan.get("warnings", ()))
        defaults = {f.name: 0 for f in dataclasses.fields(Plan)
                    if f.default is dataclasses.MISSING}
        return cls(**{**values, "plan": Plan(**{**defaults, **plan}),
                      "train": dict(values.get("train") or {}),
                      "eval": dict(values.get("eval") or {}),
                      "strategy": str(values.get("strategy", "")),
                      "replicas": int(values.get("replicas", 0)),
                      "unreadable_checkpoints": tuple(values.get("unreadable_checkpoints", ())),
                      "verify": (Verification.from_dict(values["verify"])
                                 if values.get("verify") else None),
                      "asynchronous": (Asynchronous(**_known(Asynchronous, values["asynchronous"]))
                                       if values.get("asynchronous") else None),
                      "stopping": (Stopping(**_known(Stopping, values["stopping"]))
                                   if values.get("stopping") else None),
                      "elastic": (Elastic(**_known(Elastic, values["elastic"]))
                                  if values.get("elastic") else None),
                      "refit": (Refit(**_known(Refit, values["refit"]))
                                if values.get("refit") else None),
                      "sharded_tables": tuple(Table(**_known(Table, t))
                                              for t in values.get("sharded_tables") or ()),
                      "preempted": tuple(values.get("preempted") or ())})
