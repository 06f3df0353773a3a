"""What every process that trains a TrainJob builds before the loop, the same way: the model's
inputs read from Transform's output, the loss and the model (the user's hooks or the built-in
ones) in the job's precision, the raw feature spec, and the training rows the plan needs. The
run (trainer_module/train.py) and the equivalence check (trainer_module/equivalence.py) build
from here, so the check tests what the run trains."""

from __future__ import annotations

import os
import time

from absl import logging
import tensorflow as tf

from trainer_module import features, hooks, input_pipeline, model as model_lib, precision, scaling
from trainer_module import strategy as strategy_lib, table_decay, table_plan, target_statistics
from trainer_module import warmup
from trainer_module.hook_paths import LOSS_KEY, MODEL_KEY
from trainer_module.settings import CLASSIFICATION, FLOAT16_ON_TPU, GLOBAL, MIXED_FLOAT16
from trainer_module.settings import REGRESSION
from trainer_module.settings import TrainerConfig


def model_inputs(tf_transform_output, label: str, task: str,
                 cfg: TrainerConfig) -> hooks.ModelInputs:
    """What the model hook gets (trainer_module/hooks.py), read from Transform's output."""
    spec = dict(tf_transform_output.transformed_feature_spec())
    spec.pop(features.transformed_name(label), None)
    assets = os.path.join(tf_transform_output.transform_savedmodel_dir, "assets")
    names = tf.io.gfile.listdir(assets) if tf.io.gfile.isdir(assets) else []
    sizes = {name: tf_transform_output.vocabulary_size_by_name(name) for name in names}
    outputs = 1 if task == REGRESSION else sizes[features.LABEL_VOCAB]
    sizes.pop(features.LABEL_VOCAB, None)
    return hooks.ModelInputs(spec, sizes, task, outputs, cfg)


def loss(cfg: TrainerConfig, task: str, outputs: int):
    """The per-example loss the Trainer uses: the user's (checked on a small batch) or the
    built-in one."""
    if not cfg.loss:
        return model_lib.builtin_loss(task)
    user_loss = hooks.load(LOSS_KEY, cfg.loss, 2)
    hooks.check_loss(user_loss, task, outputs)
    # The built-in model trains an ensemble: the user's loss, per member.
    return user_loss if cfg.model else model_lib.per_member(user_loss)


def schedule(plan: scaling.Plan, cooldown: bool = False) -> warmup.WarmupSchedule:
    """The run's learning rate by step: the plan's warmup, flat, then decay; with `cooldown`
    (make it in the strategy's scope), the decay ends where its `horizon` says, variables which
    early stopping's cooldown moves and a refit sets (trainer_module/reuse.py; None where the
    plan has no decay)."""
    horizon = warmup.Horizon(plan.train_steps, plan.decay_steps) if cooldown else None
    return warmup.WarmupSchedule(plan.learning_rate, plan.warmup_steps, plan.train_steps,
                                 plan.decay_steps, horizon)


def optimizer(cfg: TrainerConfig, schedule) -> tf.keras.optimizers.Optimizer:
    """The run's optimizer, in trainer.precision: AdamW with trainer.weight_decay (decoupled from
    the gradient) and the embedding tables' own (`table_decay.configured`,
    trainer_module/table_decay.py), or Adam without either, at `schedule` (`build.schedule`).
    Make it in the strategy's scope."""
    tables = table_decay.configured(cfg)
    if cfg.weight_decay or tables:
        inner = table_decay.AdamW(tables, learning_rate=schedule, weight_decay=cfg.weight_decay)
    else:
        inner = tf.keras.optimizers.Adam(learning_rate=schedule)
    return precision.wrap_optimizer(inner, cfg.precision)


def metrics(task: str) -> dict[str, tf.keras.metrics.Metric]:
    """The Trainer's metrics by logs key (make them in the strategy's scope): accuracy for
    classification, none for regression (the loss is the MSE)."""
    if task == CLASSIFICATION:
        return {"accuracy": tf.keras.metrics.SparseCategoricalAccuracy("train_accuracy")}
    return {}


def model(inputs: hooks.ModelInputs, strategy: tf.distribute.Strategy,
          tables_of: tf.distribute.Strategy | None = None,
          whole_tables: bool = False) -> tf.keras.Model:
    """The model (the user's, checked on a small batch, or the built-in one) in trainer.precision,
    outputs in float32; call it in the strategy's scope. mixed_float16 on a TPU is refused here
    too: `auto` may only find the TPU at run time.

    tables_of: the strategy whose split of the tables the built-in model takes (default:
    `strategy`'s): a process's own copy of a parameter-server model, built outside it, has a
    table of its own for each table split over the servers, whole, and its weights in the same
    places (`set_weights` from `sharded_embedding.whole_weights`). whole_tables: every table a
    Keras Embedding, none in blocks (the equivalence check's reference, Keras on one device)."""
    cfg = inputs.config
    if cfg.precision == MIXED_FLOAT16 and strategy_lib.is_tpu(strategy):
        raise strategy_lib.StrategyError(FLOAT16_ON_TPU)
    with precision.policy(cfg.precision):
        if not cfg.model:
            built = model_lib.tabular(inputs.numeric, inputs.categorical, inputs.outputs,
                                      inputs.task, cfg, packed=inputs.packed_columns,
                                      **({} if whole_tables else
                                         _split(inputs, tables_of or strategy)))
        else:
            built = hooks.load(MODEL_KEY, cfg.model, 1)(inputs)
            hooks.check_model(built, inputs)
        return precision.float32_outputs(built)


# The strategies whose replicas hold a split table's blocks (trainer_module/sharded_embedding.py).
SPLIT_BY_REPLICAS = ("MirroredStrategy", "MultiWorkerMirroredStrategy", "one device")


def table_shards(inputs: hooks.ModelInputs, strategy: tf.distribute.Strategy) -> dict[str, int]:
    """{categorical feature: the blocks its table is split into} for the built-in model, for a
    table over trainer.shard_embeddings_over bytes with its slots: the replicas under
    MirroredStrategy and MultiWorkerMirroredStrategy (trainer_module/sharded_embedding.py), the
    parameter servers under ParameterServerStrategy (its variable partitioner); else 1, a whole
    table on each replica. On one device such a table is one block (`kept_in_blocks`): a
    layer of its own as on N replicas, so a job stopped on N resumes on one and back."""
    cfg = inputs.config
    kind = strategy_lib.name(strategy)
    if kind == "ParameterServerStrategy":
        holders = strategy_lib.cluster_size(strategy)[1]
    elif kind in SPLIT_BY_REPLICAS:
        holders = strategy.num_replicas_in_sync
    else:
        return {key: 1 for key in inputs.categorical}
    return {key: table_plan.shards_for(size, cfg.embedding_dim, holders,
                                        cfg.shard_embeddings_over)
            for key, size in inputs.categorical.items()}


def tables_in_blocks(inputs: hooks.ModelInputs,
                     strategy: tf.distribute.Strategy) -> dict[str, int]:
    """{categorical feature: blocks} for the tables that are layers of their own, in
    `table_shards` blocks (ShardedEmbedding), under a synchronous strategy that splits tables
    (not a TPU's, not asynchronous): those over trainer.shard_embeddings_over, one block each
    on one device."""
    if strategy_lib.name(strategy) not in SPLIT_BY_REPLICAS:
        return {}
    cfg, shards = inputs.config, table_shards(inputs, strategy)
    alone = strategy.num_replicas_in_sync == 1
    # One block is one replica's: on N replicas a table of fewer rows than 2 stays whole.
    return {key: shards[key] for key, size in inputs.categorical.items()
            if table_plan.kept_in_blocks(size, cfg.embedding_dim, cfg.shard_embeddings_over)
            and (alone or shards[key] > 1)}


def _split(inputs: hooks.ModelInputs, strategy: tf.distribute.Strategy) -> dict:
    """model.tabular's arguments for the tables split: by the replicas' exchange (`shards`), or
    over the parameter servers (`server_blocks`)."""
    if strategy_lib.name(strategy) == "ParameterServerStrategy":
        return {"server_blocks": table_shards(inputs, strategy)}
    return {"shards": tables_in_blocks(inputs, strategy)}


def train_input(job, plan: scaling.Plan, raw_spec: dict, transform, start: int,
                asynchronous: bool = False):
    """The run's dataset_fn of its fit rows: each worker of an asynchronous run shuffles the
    whole split its own way and starts afresh on resume (no global order to skip into); a
    synchronous run skips the steps trained before `start`."""
    cfg = job.trainer
    return input_pipeline.make_dataset_fn(
        job.train_files, raw_spec, job.label, job.task, plan.replica_step_batch, training=True,
        seed=None if asynchronous else cfg.seed, skip_steps=0 if asynchronous else start,
        transform=transform, part=input_pipeline.FIT,
        validation_share=cfg.validation_share, global_order=cfg.input_order == GLOBAL)


def input_fingerprint(job, plan: scaling.Plan, validating: bool) -> str:
    """The fingerprint of what the loop reads (input_pipeline.fingerprint): the train split's
    rows and what orders them on this topology (the hosts, where each reads its own files)."""
    cfg = job.trainer
    cache, chunk_steps = input_pipeline.caching(input_pipeline.list_files(job.train_files))
    return input_pipeline.fingerprint(
        job.train_files, seed=None if plan.asynchronous else cfg.seed,
        validation_share=cfg.validation_share if validating else 0.0,
        global_batch=plan.global_batch, cached=cache, chunk_steps=chunk_steps,
        hosts=1 if cfg.input_order == GLOBAL or plan.asynchronous else plan.hosts)


def fill_statistics(model: tf.keras.Model, job, raw_spec: dict, transform,
                    fit_rows=None) -> int:
    """The model's target statistics (trainer_module/target_statistics.py) counted from the job's
    fit rows (its train split less its validation share), every process alike: the rows counted,
    0 where the model has none (nothing is read then). fit_rows: those rows, each once, where
    the training input has them (its dataset_fn's `once`: read here, they are its cache); else
    they are read in a pass of their own."""
    if not target_statistics.layers(model):
        return 0
    cfg = job.trainer
    dataset = fit_rows.rebatch(target_statistics.FILL_BATCH) if fit_rows is not None else (
        input_pipeline.make_dataset_fn(
            job.train_files, raw_spec, job.label, job.task, target_statistics.FILL_BATCH,
            training=False, transform=transform, part=input_pipeline.FIT,
            validation_share=cfg.validation_share)(None))
    tic = time.perf_counter()
    rows = target_statistics.fill(model, dataset, job.task)
    logging.info("Target statistics: %d fit rows counted in %.2f s", rows,
                 time.perf_counter() - tic)
    return rows


def raw_spec(tf_transform_output, label: str) -> dict:
    """The raw examples' feature spec, as Transform analyzed them (the label included)."""
    spec = dict(tf_transform_output.raw_feature_spec())
    if label not in spec:
        raise ValueError(f"label '{label}' is not among the raw features: {sorted(spec)}")
    return spec


def train_rows(cfg: TrainerConfig, train_files) -> int | None:
    """The training split's rows where the plan needs them (steps or batch from the data)."""
    if not scaling.needs_rows(cfg):
        return None
    recorded = input_pipeline.recorded_rows(train_files)
    if recorded is not None:
        return recorded
    return input_pipeline.count_records(input_pipeline.list_files(train_files))
