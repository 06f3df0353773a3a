"""The Trainer's typed settings: `TrainerConfig`, every training setting, and its checks.

Fields marked `run_parameter` are the ones a Kubeflow run can override (`lockstep submit --param
train_steps=500`); `RUN_PARAMETERS` is derived from those marks, never listed by hand. `coerce`
is the one rule a setting's value is read by (the config file, the flags, a custom_config, a KFP
run parameter). What crosses into the Trainer and Transform as TFX `custom_config` is encoded and
read back by trainer_module/custom_config.py (TrainSpec, TransformSpec).

The task (classification or regression) is decided once, before the pipeline runs, from the
label column (pipeline/data_check.py, `task_for_label`) or the user's `--task`; Transform,
Trainer and the Evaluator's config all take it from there; so are the columns' roles
(pipeline/column_roles.py), which reach preprocessing_fn as TransformSpec's column lists.

This module imports nothing from the pipeline or its components, and no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from runtime import exit_status
from trainer_module import hook_paths, slices

CLASSIFICATION, REGRESSION = "classification", "regression"
TASKS = (CLASSIFICATION, REGRESSION)
PARAMETER_SERVER = "parameter_server"  # asynchronous: trainer_module/parameter_server.py
STRATEGIES = ("auto", "tpu", "multi_worker", "mirrored", "cpu", PARAMETER_SERVER)
# What the layers compute in (trainer_module/precision.py). The variables, the loss and the model's
# outputs stay float32 under all three.
FLOAT32, MIXED_BFLOAT16, MIXED_FLOAT16 = "float32", "mixed_bfloat16", "mixed_float16"
PRECISIONS = (FLOAT32, MIXED_BFLOAT16, MIXED_FLOAT16)
LR_SCALINGS = ("sqrt", "linear")  # how the learning rate follows the global batch
# How several hosts read the training split (trainer_module/input_pipeline.py): each its own share
# of the files ("sharded"), or every host the one global order, keeping its slice of each global
# batch ("global": each step's examples are the same for any host count, which an elastic resume
# on another number of hosts needs; every host reads every record).
SHARDED, GLOBAL = "sharded", "global"
INPUT_ORDERS = (SHARDED, GLOBAL)
# Said where the config asks for it and where `auto` finds a TPU at run time (train.build_model).
FLOAT16_ON_TPU = ("trainer.precision = mixed_float16 cannot run on a TPU (TPUStrategy refuses loss "
                  "scaling); use mixed_bfloat16, which TPUs compute natively")
class TrainerConfigError(ValueError):
    """A trainer setting that cannot be used; the message names it."""

    lockstep_exit_status = exit_status.INPUT


def _run_parameter(default):
    return dataclasses.field(default=default, metadata={"run_parameter": True})


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    # Strategy: auto | tpu | multi_worker | mirrored | cpu (synchronous; trainer_module/strategy.py)
    # or parameter_server (asynchronous; trainer_module/parameter_server.py).
    strategy: str = "auto"
    tpu: str = ""  # TPU name, or "local" on a TPU VM; also read from $TPU_NAME
    tpu_zone: str = ""
    tpu_project: str = ""
    # A TPU slice preset (v5e-4, v5e-16, v4-32, ...; see trainer_module/slices.py): sets the
    # replica count for `lockstep plan`, and the Trainer's TPU node selectors and chips when
    # compiled for Kubeflow.
    tpu_slice: str = ""
    allow_fallback: bool = False  # true: a TPU that is not there falls back instead of failing
    # A multi-host slice's Trainer on Vertex AI: the slices to submit on, in order, when Vertex has
    # no capacity or quota for tpu_slice, each with the accumulation that keeps tpu_slice's
    # global batch (components/vertex_training.py; docs/tpu.md).
    fallback_slices: list[str] = dataclasses.field(default_factory=list)
    # Several GPU machines (components/vertex_training.py; docs/training.md, "Several GPU
    # machines"): the Trainer task submits a Vertex AI custom job of gpu_machines machines of
    # gpu_machine_type (e.g. "a2-highgpu-8g"), each with gpus_per_machine GPUs of gpu_accelerator
    # (Vertex's accelerator type, e.g. "NVIDIA_TESLA_A100"; both read from an A2, A3 or G2
    # machine type when left out): a chief and gpu_machines - 1 workers under
    # MultiWorkerMirroredStrategy. 0: the Trainer trains in its task.
    gpu_machines: int = 0
    gpu_machine_type: str = ""
    gpu_accelerator: str = ""
    gpus_per_machine: int = 0
    # The machine counts to submit on, in order, when Vertex has no capacity or quota for
    # gpu_machines, each with the accumulation that keeps gpu_machines' global batch.
    fallback_gpu_machines: list[int] = dataclasses.field(default_factory=list)
    emulate_replicas: int = 0  # >1: split the CPU into N logical devices under MirroredStrategy
    # strategy parameter_server without TF_CONFIG: a cluster on loopback of this many workers
    # and parameter servers (with TF_CONFIG, its cluster).
    ps_workers: int = 2
    ps_servers: int = 1
    # Batch: give per_replica_batch (the TPU way) or global_batch, not both. Neither (0): the
    # plan picks the per-replica batch for the hardware and the data (trainer_module/scaling.py,
    # default_per_replica_batch: 256 on a CPU or GPU replica, 128 on a TPU core, halved on small
    # data down to 32) and says so.
    per_replica_batch: int = _run_parameter(0)
    global_batch: int = 0
    # Steps, by default from the data: `epochs` passes over the training split (counted by the
    # Trainer), at least `min_train_examples` (small data needs many passes); steps = examples //
    # global batch either way. Or a fixed example budget (train_examples), or fixed train_steps.
    epochs: float = _run_parameter(40.0)
    min_train_examples: int = 12_800
    # A ceiling on the examples the epochs rule gives (0: none): on a large table the validation
    # rows decide when to stop within it (trainer_module/early_stopping.py), scored at least every
    # 12,800 examples; when they stop improving, the rate decays over a cooldown and training ends.
    max_train_examples: int = 2_000_000
    # The share of the train split's rows held out of fitting as validation rows, which pick the
    # best checkpoint and stop training once `patience` scores in a row did not improve
    # (trainer_module/early_stopping.py; the steps above are then a ceiling). 0: fit every row,
    # keep the last weights.
    validation_share: float = 0.1
    patience: int = 5
    # After early stopping on a train split of at most this many rows, train again from the start
    # on every one of them (the validation rows too) for the kept weights' epochs, and export
    # that model (trainer_module/refit.py). Past it, a tenth more rows moved no table's figure
    # and the second fit costs about what the first did (nycflights13: 10.3 s beside 16). 0: none.
    refit_rows: int = 100_000
    # On a train split of bag_min_rows to bag_rows rows, the refit is made `bags` times, each
    # from its own seed, and the mean of the models is exported (trainer_module/bag.py): a seed
    # moves a small table's held-out figure by more than the mean of two does. Below
    # bag_min_rows a second refit's fixed costs are most of the Trainer (penguins: 9.0 -> 12.1
    # s) and its eval split too small to show a gain. 1: one refit.
    bags: int = 2
    bag_min_rows: int = 1_000
    bag_rows: int = 5_000
    train_examples: int = _run_parameter(0)
    train_steps: int = _run_parameter(0)
    # Learning rate: scaled with the global batch (lr_scaling), with linear warmup. Anchored at
    # the default batch of a CPU or GPU replica (256): AdamW at 0.004 for the built-in model
    # (0.02, the rate of the earlier 32-16 MLP, overfit MplsStops within two epochs: eval AUC
    # 0.893 against 0.902 at 0.004; docs/training.md, "The built-in model").
    base_learning_rate: float = _run_parameter(0.004)
    base_batch: int = 256
    # How the rate follows the global batch: "sqrt", with its square root (Adam's rule: Malladi
    # et al. 2022), or "linear", in proportion (SGD's: Goyal et al. 2017). Linear made small
    # data's rate too small: loans (batch 64) 0.005, accuracy 0.9920; sqrt 0.01, 0.9990
    # (docs/performance.md); batch 256 (nycflights13) is the anchor, the same either way.
    lr_scaling: str = "sqrt"
    warmup_steps: int = 20
    # The last decay_share of the steps lower the rate linearly to zero (warmup, flat, decay: a
    # long run settles instead of ending at the full rate; 0: flat to the end). docs/
    # performance.md, "The learning-rate schedule": +1.1 to +1.7 points of accuracy on 300k-row
    # data, the same on small data (where decaying over all the steps, cosine, cost up to 1.8).
    decay_share: float = 0.2
    steps_per_execution: int = 10
    checkpoint_every: int = 200
    log_every: int = 100
    jit_compile: bool = False
    # Gradient accumulation: each replica sums the gradients of this many micro-batches of
    # per_replica_batch, then the one update of the global step: global batch = per-replica batch
    # x replicas x accumulation_steps. A small slice reproduces a larger one's global batch,
    # learning rate and steps this way (`lockstep plan --slice v5e-4 --like v5e-16`).
    accumulation_steps: int = _run_parameter(1)
    # Several hosts (a multi-host slice, several machines): "sharded", each reads its own share
    # of the files; "global", every host reads the one order and keeps its slice of each global
    # batch, so a job resumed on another number of hosts trains on the same examples at every
    # step (docs/training.md, "Elastic resume"). One host reads the global order either way.
    input_order: str = SHARDED
    # float32 | mixed_bfloat16 (TPUs; runs on CPU) | mixed_float16 (GPUs, with dynamic loss
    # scaling; not on TPU): the layers compute in 16 bits, the variables and outputs stay float32.
    precision: str = FLOAT32
    # The built-in model (trainer_module/model.py): numeric embeddings and a TabM-mini ensemble
    # head of `ensemble_members` members over hidden layers of hidden_units, dropout between them;
    # column_dropout a row's whole column; both keyed on the row (trainer_module/row_dropout.py).
    hidden_units: list[int] = dataclasses.field(default_factory=lambda: [128, 128, 128])
    l2: float = 0.0
    embedding_dim: int = 8
    ensemble_members: int = 4
    dropout: float = 0.0
    column_dropout: float = 0.0
    # Each text or code value's target statistics (its fit rows' share of each class, or mean
    # label; a row's own fold left out in training: trainer_module/target_statistics.py).
    target_statistics: bool = True
    # A table with target statistics whose seen values average fewer fit rows than this is its
    # statistics alone, its embedding left out (a person id seen twice; 0: every embedding kept;
    # docs/training.md, "Target statistics").
    embedding_min_rows: float = 50.0
    # AdamW's decoupled weight decay (0 and table_weight_decay 0: Adam).
    weight_decay: float = 3e-4
    # The built-in model's embedding tables' own decay (trainer_module/table_decay.py): every row
    # shrinks at every step, looked up or not. -1 (the default): weight_decay's, AdamW's model;
    # 3.0 took ISLR Caravan's held-out AUC from 0.7689 to 0.7726 (four seeds) and cost Arrests,
    # Car, InstEval, CollegeDistance and CPS1988 0.0016 to 0.0085 (docs/training.md, "AdamW").
    table_weight_decay: float = -1.0
    # The model scored, kept and exported with its weights' moving average, this momentum after
    # each global step (trainer_module/weight_average.py; a window of about 1 / (1 - m) steps;
    # 0: the trained weights as they are). docs/training.md, "Weight averaging".
    weight_average: float = 0.99
    # The built-in model's embedding tables split by rows over the replicas (model parallelism,
    # trainer_module/sharded_embedding.py): a table whose rows with Adam's two slots take more
    # bytes than this, under MirroredStrategy (a CPU's emulated replicas, GPUs) and
    # MultiWorkerMirroredStrategy (several processes or machines). 0: every table;
    # -1: none (each replica holds every table whole).
    shard_embeddings_over: int = 64 << 20
    seed: int = 42
    warm_start: bool = False
    # Your own model and loss, by dotted path ("package.module:function"; trainer_module/hooks.py):
    # model(inputs: ModelInputs) -> tf.keras.Model; loss(labels, outputs) -> [batch] per-example
    # losses. "": the built-in MLP and loss. model_params: your settings, handed to your model.
    model: str = ""
    model_params: dict = dataclasses.field(default_factory=dict)
    loss: str = ""
    # Before training, check that N replicas make the update one device makes on the global batch
    # with this model and loss (trainer_module/equivalence.py, as `lockstep verify`); a run that fails
    # it stops before training. The figures go into the run summary and the report.
    verify: bool = False

    def validate(self) -> None:
        if self.per_replica_batch < 0 or self.global_batch < 0:
            raise TrainerConfigError("trainer batch sizes must be positive")
        if self.train_steps < 0 or self.train_examples < 0 or self.min_train_examples < 0:
            raise TrainerConfigError(
                "trainer.train_steps, train_examples and min_train_examples cannot be negative")
        if self.train_steps <= 0 and self.train_examples <= 0 and self.epochs <= 0:
            raise TrainerConfigError(
                "set trainer.epochs (a number of passes over the training split), "
                "trainer.train_examples or trainer.train_steps")
        if self.steps_per_execution < 1:
            raise TrainerConfigError("trainer.steps_per_execution must be at least 1")
        if not 0 <= self.decay_share < 1:
            raise TrainerConfigError(
                f"trainer.decay_share must be at least 0 and below 1, got {self.decay_share}")
        if not 0 <= self.validation_share < 0.5 or self.patience < 1:
            raise TrainerConfigError(
                "trainer.validation_share must be at least 0 and below 0.5, trainer.patience at "
                f"least 1; got {self.validation_share} and {self.patience}")
        if self.shard_embeddings_over < -1:
            raise TrainerConfigError("trainer.shard_embeddings_over is a number of bytes, 0 (shard "
                                     f"every table) or -1 (none), got {self.shard_embeddings_over}")
        if self.max_train_examples < 0:
            raise TrainerConfigError("trainer.max_train_examples cannot be negative")
        if not 0 <= self.weight_average < 1:
            raise TrainerConfigError(f"trainer.weight_average is a momentum, at least 0 and below "
                                     f"1 (0: no average), got {self.weight_average}")
        if (self.ensemble_members < 1 or not 0 <= self.dropout < 1 or self.weight_decay < 0
                or not 0 <= self.column_dropout < 1 or self.embedding_min_rows < 0
                or (self.table_weight_decay < 0 and self.table_weight_decay != -1)):
            raise TrainerConfigError(
                "trainer.ensemble_members must be at least 1, trainer.dropout and column_dropout "
                "at least 0 and below 1, trainer.weight_decay and embedding_min_rows at least 0, "
                "table_weight_decay at least 0 (-1: weight_decay's)")
        if self.accumulation_steps < 1:
            raise TrainerConfigError(
                f"trainer.accumulation_steps must be at least 1, got {self.accumulation_steps}")
        if self.input_order not in INPUT_ORDERS:
            raise TrainerConfigError(f"trainer.input_order must be sharded or global, got "
                                     f"{self.input_order!r}")
        if self.lr_scaling not in LR_SCALINGS:
            raise TrainerConfigError(f"trainer.lr_scaling must be sqrt or linear, got "
                                     f"{self.lr_scaling!r}")
        if self.precision not in PRECISIONS:
            raise TrainerConfigError(f"trainer.precision must be {', '.join(PRECISIONS[:-1])} or "
                                     f"{PRECISIONS[-1]}, got {self.precision!r}")
        if self.precision == MIXED_FLOAT16 and (self.strategy == "tpu" or self.tpu_slice):
            raise TrainerConfigError(FLOAT16_ON_TPU)
        if self.strategy not in STRATEGIES:
            raise TrainerConfigError(f"trainer.strategy must be {', '.join(STRATEGIES[:-1])} or "
                                     f"{STRATEGIES[-1]}, got {self.strategy!r}")
        if self.strategy == PARAMETER_SERVER:
            self._validate_parameter_server()
        try:
            hook_paths.check_path(hook_paths.MODEL_KEY, self.model)
            hook_paths.check_path(hook_paths.LOSS_KEY, self.loss)
        except hook_paths.HookError as err:
            raise TrainerConfigError(str(err)) from None
        if self.tpu_slice:
            try:
                slices.get(self.tpu_slice)
            except slices.SliceError as err:
                raise TrainerConfigError(f"trainer.tpu_slice: {err}") from None
            if self.strategy not in ("auto", "tpu"):
                raise TrainerConfigError(
                    f"trainer.tpu_slice={self.tpu_slice!r} needs trainer.strategy auto or tpu, "
                    f"got {self.strategy!r}")
        self._validate_fallback_slices()
        self._validate_gpu_machines()
        self._validate_bags()

    def _validate_bags(self) -> None:
        if self.bags < 1 or min(self.bag_rows, self.bag_min_rows) < 0:
            raise TrainerConfigError(
                f"trainer.bags must be at least 1, bag_min_rows and bag_rows at least 0; got "
                f"{self.bags}, {self.bag_min_rows} and {self.bag_rows}")

    def _validate_fallback_slices(self) -> None:
        """Each a known slice whose replicas divide tpu_slice's global batch (x accumulation)."""
        if self.fallback_slices and not self.tpu_slice:
            raise TrainerConfigError("trainer.fallback_slices needs trainer.tpu_slice (the slice "
                                     "they stand in for)")
        for name in self.fallback_slices:
            if not isinstance(name, str):
                raise TrainerConfigError(f"trainer.fallback_slices: a slice is a name such as "
                                         f"\"v5e-8\", got {name!r}")
            try:
                fallback, first = slices.get(name), slices.get(self.tpu_slice)
            except slices.SliceError as err:
                raise TrainerConfigError(f"trainer.fallback_slices: {err}") from None
            if (first.replicas * self.accumulation_steps) % fallback.replicas:
                raise TrainerConfigError(
                    f"trainer.fallback_slices: {name} ({fallback.replicas} replicas) cannot keep "
                    f"the global batch of {first.name} ({first.replicas} replicas x "
                    f"{self.accumulation_steps}): its replicas must divide "
                    f"{first.replicas * self.accumulation_steps}")


    def _validate_gpu_machines(self) -> None:
        """A machine type with a count; no TPU, emulated replicas or parameter servers beside
        them; fallback counts that keep gpu_machines' global batch."""
        if self.gpu_machines < 0 or self.gpus_per_machine < 0:
            raise TrainerConfigError("trainer.gpu_machines and trainer.gpus_per_machine cannot be "
                                     "negative")
        if not self.gpu_machines:
            if self.fallback_gpu_machines:
                raise TrainerConfigError("trainer.fallback_gpu_machines needs trainer.gpu_machines "
                                         "(the count they stand in for)")
            return
        if not self.gpu_machine_type:
            raise TrainerConfigError(f"trainer.gpu_machines = {self.gpu_machines} needs "
                                     "trainer.gpu_machine_type (a Vertex AI machine type with "
                                     "GPUs, e.g. \"a2-highgpu-8g\")")
        clash = [name for name, value in (
            ("trainer.tpu_slice", self.tpu_slice), ("trainer.tpu", self.tpu),
            ("trainer.emulate_replicas", self.emulate_replicas > 1),
            (f"trainer.strategy = {self.strategy}", self.strategy not in ("auto", "multi_worker")))
            if value]
        if clash:
            raise TrainerConfigError(f"trainer.gpu_machines cannot take {clash[0]} (its machines "
                                     "train under MultiWorkerMirroredStrategy: strategy auto or "
                                     "multi_worker)")
        for count in self.fallback_gpu_machines:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise TrainerConfigError(f"trainer.fallback_gpu_machines: a machine count such as "
                                         f"2, got {count!r}")
            if (self.gpu_machines * self.accumulation_steps) % count:
                raise TrainerConfigError(
                    f"trainer.fallback_gpu_machines: {count} machines cannot keep the global batch "
                    f"of {self.gpu_machines} machines x {self.accumulation_steps} accumulation: "
                    f"the count must divide {self.gpu_machines * self.accumulation_steps}")

    def _validate_parameter_server(self) -> None:
        if self.ps_workers < 1 or self.ps_servers < 1:
            raise TrainerConfigError("trainer.ps_workers and trainer.ps_servers must be at least 1")
        refused = [
            (self.precision == MIXED_FLOAT16, "trainer.precision = mixed_float16 (tf-keras "
             "refuses loss scaling under ParameterServerStrategy; use float32 or mixed_bfloat16)"),
            (bool(self.tpu or self.tpu_slice), "a TPU (trainer.tpu / trainer.tpu_slice; TPUs "
             "train synchronously: strategy auto or tpu)"),
            (self.accumulation_steps > 1, "trainer.accumulation_steps > 1 (a synchronous batch "
             "plan: every worker applies its own batches)"),
            (self.emulate_replicas > 1, "trainer.emulate_replicas (its workers are processes: "
             "trainer.ps_workers)"),
            (self.verify, "trainer.verify (it checks synchronous training against one device)"),
            (self.jit_compile, "trainer.jit_compile (not offered for the asynchronous step)"),
        ]
        for asked, what in refused:
            if asked:
                raise TrainerConfigError(f"trainer.strategy = parameter_server cannot take {what}")


# name -> type of each trainer setting a Kubeflow run can override.
RUN_PARAMETERS: dict[str, type] = {
    f.name: f.type if isinstance(f.type, type) else {"int": int, "float": float}[f.type]
    for f in dataclasses.fields(TrainerConfig) if f.metadata.get("run_parameter")}


def coerce(value: Any, default: Any, where: str) -> Any:
    """value as the type of a setting whose default is `default`: the one rule for the config
    file, the flags, a custom_config and a KFP run parameter. bool, int and float are never
    confused and text is never parsed; a whole float is an int (JSON numbers from KFP)."""
    kind = type(default)
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, os.PathLike):
        return os.fspath(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind is list and isinstance(value, (list, tuple)):
        return list(value)
    if kind is dict and isinstance(value, dict):  # its values are checked where they are used
        return {str(k): v for k, v in value.items()}
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise TrainerConfigError(f"{where} must be {kind.__name__}, got {value!r}")


def trainer_config_from_dict(values: dict[str, Any], where: str = "trainer") -> TrainerConfig:
    """A TrainerConfig from a dict of its fields; an unknown or mistyped key is an error."""
    defaults = TrainerConfig()
    fields = {f.name for f in dataclasses.fields(TrainerConfig)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise TrainerConfigError(f"unknown {where} key(s) {', '.join(unknown)} "
                                 f"(known: {', '.join(sorted(fields))})")
    config = TrainerConfig(**{name: coerce(value, getattr(defaults, name), f"{where}.{name}")
                              for name, value in values.items()})
    config.validate()
    return config


def check_task(task: str) -> str:
    if task not in TASKS:
        raise TrainerConfigError(f"task must be classification or regression, got {task!r}")
    return task
