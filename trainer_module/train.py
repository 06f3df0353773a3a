"""One training job, end to end: strategy, plan, input, model, loop, checkpoints, export.

`run_fn` (trainer_module/run_fn.py) maps TFX's FnArgs onto a TrainJob (trainer_module/job.py);
tests, benchmarks and the parameter-server trainer's process train one directly
(`python -m trainer_module.train job.json`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time

from absl import logging
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import actions as actions_lib, bag, build, controller as controller_lib
from trainer_module import early_stopping, eval_split, model as model_lib
from trainer_module import export, input_pipeline, loop, parameter_server, verify_process
from runtime import processes
from trainer_module import refit, resume, reuse, scaling, sharded_embedding, slices
from trainer_module import scratch as scratch_lib
from trainer_module import strategy as strategy_lib
from runtime import error_line, termination
from trainer_module import weight_average
from trainer_module.job import TrainJob
from trainer_module.settings import GLOBAL, PARAMETER_SERVER, TrainerConfig
from trainer_module.summary import Asynchronous, Elastic, TrainingSummary


def _warm_start(model: tf.keras.Model, base_model: str, average=None) -> tuple[bool, str]:
    """(warm-started, why not): a base model none of whose weights fit this one (another
    architecture: a model of an earlier lockstep, another hook) is said so, and training starts
    afresh. The weights' average, if any, starts from the warm-started weights."""
    if not base_model or not tf.io.gfile.exists(os.path.join(base_model, "saved_model.pb")):
        return False, ""
    matched = export.warm_start(model, base_model, model_lib.sharded_parts(model)[1])
    logging.info("Warm start from %s: %d of %d weights", base_model, matched, len(model.weights))
    if matched:
        if average:
            average.reset()
        return True, ""
    why = (f"none of the serving model's weights fit this model (another architecture): "
           f"trained from scratch instead of warm-starting from {base_model}")
    logging.warning(why)
    return False, why


def _train_rows(job: TrainJob) -> int | None:
    """The training split's rows, counted once for the job: where the plan takes its steps or
    batch from the data, or early stopping its epoch (None where neither needs them)."""
    cfg = job.trainer
    if cfg.validation_share > 0:  # early stopping scores once an epoch: it needs them
        cfg = dataclasses.replace(cfg, train_steps=0, train_examples=0)
    return build.train_rows(cfg, job.train_files)


def _plan(job: TrainJob, strategy: tf.distribute.Strategy, rows: int | None,
          restore_from: str) -> tuple[TrainJob, scaling.Plan]:
    """(the job with its validation share capped for its rows, early_stopping.capped: every
    reader of the split's parts gets it; the scaling plan for this strategy, printed, with its
    warnings logged). A synchronous job that resumes from a checkpoint written on another
    topology keeps its global batch (elastic resume: trainer_module/resume.py). rows: the
    training split's (`_train_rows`), given to the plan where its steps or batch come from the
    data."""
    job = early_stopping.capped(job, rows)
    cfg = job.trainer
    train_rows = rows if scaling.needs_rows(cfg) else None
    asynchronous = parameter_server.is_parameter_server(strategy)
    cluster = strategy_lib.cluster_size(strategy) if asynchronous else None
    keep = None if asynchronous else resume.recorded_topology(restore_from)
    plan = scaling.make_plan(cfg, strategy.num_replicas_in_sync, strategy_lib.is_tpu(strategy),
                             train_rows, cluster, strategy_lib.hardware(strategy),
                             hosts=strategy_lib.hosts(strategy), keep=keep)
    logging.info("\n%s", plan.describe())
    if cfg.tpu_slice:
        expected = slices.get(cfg.tpu_slice).replicas
        if strategy.num_replicas_in_sync != expected:
            logging.warning("trainer.tpu_slice=%s means %d replicas, but %s has %d: the global "
                            "batch is %d, not what `lockstep plan` printed", cfg.tpu_slice, expected,
                            strategy_lib.name(strategy), strategy.num_replicas_in_sync, plan.global_batch)
    for warning in plan.warnings:
        logging.warning(warning)
    return job, plan


def train_job(job: TrainJob, callbacks=()) -> TrainingSummary:
    """Trains, evaluates and exports one job; returns its summary (plan, train logs, eval).

    callbacks: extra actions, callback(step, logs) after each chunk (trainer_module/actions.py);
    not passed on to the process of its own that a parameter_server run trains in."""
    cfg = job.trainer
    if cfg.strategy == PARAMETER_SERVER and not os.environ.get(
            parameter_server.TRAINER_PROCESS_ENV):
        return parameter_server.run_in_subprocess(job)
    if os.environ.get(parameter_server.TRAINER_PROCESS_ENV):
        parameter_server.relay_progress()
    strategy = (parameter_server.make_strategy(cfg) if cfg.strategy == PARAMETER_SERVER
                else strategy_lib.resolve_strategy(cfg))
    verified = (verify_process.verified(job, strategy_lib.hardware(strategy)) if cfg.verify
                else None)
    # Read once for the job, the refit's fit too: the split's rows (the refit's steps are fixed,
    # and it holds out no validation rows), the Transform output and its traced transform.
    rows, tf_transform_output = _train_rows(job), tft.TFTransformOutput(job.transform_dir)
    shared = (rows, tf_transform_output, None if parameter_server.is_parameter_server(strategy)
              else _traced_transform(tf_transform_output), reuse.Kept())
    summary, again = _fit(job, strategy, shared, callbacks, verified)
    if again is None:
        return summary
    logging.info("Refit: every row of the train split, %d steps", again.trainer.train_steps)
    first, chief = early_stopping.capped(job, rows), strategy_lib.is_chief(strategy)
    members, models = refit.members(again, rows), []  # a bag of refits: trainer_module/bag.py
    try:
        refitted = [_fit(member, strategy, shared, callbacks, None, (models, len(members)))[0]
                    for member in members]
    except termination.Preempted:
        if chief:  # the first fit's and the members' before: the next attempt resumes at their ends
            for done in [first, *members[:len(models)]]:
                resume.park_last(done)
        raise
    if chief:
        for done in [first, *members]:
            resume.finished(done)
    return refit.merged(summary, refitted, rows, again.trainer.seed)


def _fit(job: TrainJob, strategy, shared, callbacks, verified,
         bagged=None) -> tuple[TrainingSummary, TrainJob | None]:
    """One fit of the job on `strategy`, exported unless a refit follows: (its summary, the
    refit's TrainJob or None; refit.py). shared: (the train split's rows, the Transform output,
    its traced transform or None, the fit before's objects: reuse.Kept), made once by train_job.
    bagged: a refit's (the bag's models before it, its size): the last exports their mean."""
    cfg = job.trainer
    tf.keras.utils.set_random_seed(cfg.seed)
    tf.keras.backend.reset_uids()  # each fit's layers named as in a fresh process ("model")
    asynchronous = parameter_server.is_parameter_server(strategy)
    rows, tf_transform_output, traced, kept = shared
    restore_from = resume.restore_from(job)  # read once, passed on (and the rows)
    job, plan = _plan(job, strategy, rows, restore_from)
    inputs = build.model_inputs(tf_transform_output, job.label, job.task, cfg)
    loss, validating = build.loss(cfg, job.task, inputs.outputs), cfg.validation_share > 0
    fingerprint = build.input_fingerprint(job, plan, validating)
    with strategy.scope():
        fitted, model, schedule, optimizer, average, metrics = _objects(
            cfg, job.task, plan, build.model(inputs, strategy), asynchronous, kept, bagged)
        best = early_stopping.BestWeights(model, schedule.horizon) if validating else None
        layer = tf_transform_output.transform_features_layer() if asynchronous else None
    transform, chief = layer or traced, strategy_lib.is_chief(strategy)
    # A worker that is not the chief writes checkpoints and an export too (the all-reduce and the
    # export's collectives need every worker), into a directory of its own removed at the end.
    with scratch_lib.Scratch(chief) as scratch:
        topology = resume.TopologyState(scaling.Topology.of(plan))  # saved in each checkpoint
        if chief:
            resume.mark(job)
        raw_spec = build.raw_spec(tf_transform_output, job.label)
        scorer = _local_copy(model, inputs, strategy) if asynchronous and validating else None
        stopping = _early_stopping(job, plan, rows, model, loss, best, raw_spec, transform,
                                   scorer=scorer, average=average) if validating else None
        controller = controller_lib.Controller(
            model, optimizer, restore_from=restore_from, strategy=strategy,
            # Every worker saves (the all-reduce needs them all); only the chief's copy is kept.
            directory=resume.checkpoint_dir(job) if chief else scratch.mkdir("ckpt"),
            total_steps=plan.train_steps, steps_per_execution=_chunk(cfg, plan),
            checkpoint_every=cfg.checkpoint_every,
            actions=[*_actions(job, plan, stopping, schedule), *callbacks],
            tracked={resume.TOPOLOGY: topology, "best": best, "average": average})
        start = controller.start_step
        # Read now: a job that trains to its end removes what was parked.
        preempted = tuple(controller_lib.preempted_at(restore_from, start) if start else ())
        elastic = _elastic(job, plan, topology.restored, start, model)
        warm, cold_because = (_warm_start(model, job.base_model, average)
                              if start == 0 and cfg.warm_start else (False, ""))
        dataset_fn = build.train_input(job, plan, raw_spec, transform, start, asynchronous)
        # After a warm start, a restore; its pass parses the rows training reads.
        build.fill_statistics(model, job, raw_spec, transform,
                              fit_rows=dataset_fn.once(plan.replicas, plan.hosts))
        steps = _step_loop(job, strategy, plan, model, optimizer, loss, metrics, dataset_fn,
                           average, fitted)
        logs, train_seconds = _train_to_end(controller, steps, job, chief, not stopping and average)
        kept.keep(cfg, plan, asynchronous, reuse.Fitted(model=model, optimizer=optimizer,
                  schedule=schedule, average=average, metrics=metrics, steps=steps))
        tables = model_lib.split_tables(model)  # before an asynchronous run's copy, its tables whole
        model = _local_copy(model, inputs, strategy) if asynchronous else model  # off the servers
        ended = stopping.summary(controller.step, plan.train_steps) if stopping else None
        again = refit.job(job, plan, ended, rows, asynchronous)
        if chief and again is None and bagged is None:  # parked: needed until the refits end
            resume.finished(job)
        models, size = bagged or ([], 1)
        models.append(model)
        eval_metrics = {} if again or len(models) < size else _evaluate_and_export(
            models, job, plan, raw_spec, tf_transform_output, transform,
            job.serving_model_dir if chief else scratch.mkdir("export"))
        return TrainingSummary(
            plan, dict(logs), eval_metrics, strategy_lib.name(strategy),
            strategy.num_replicas_in_sync, chief=chief, train_seconds=train_seconds,
            warm_started=bool(warm), not_warm_started=cold_because, model=cfg.model,
            loss=cfg.loss, verify=verified, resumed_at=start,
            unreadable_checkpoints=tuple(controller.unreadable),
            stopping=ended, elastic=elastic, input_fingerprint=fingerprint, preempted=preempted,
            sharded_tables=tables,
            asynchronous=_asynchronous_summary(steps, plan) if asynchronous else None), again


def _traced_transform(tf_transform_output):
    """The transform the train, validation and eval input apply, traced once for the three
    (input_pipeline.traced_once). An asynchronous run applies the layer itself, made in the
    strategy's scope, so that its tables are copied to every worker."""
    return input_pipeline.traced_once(tf_transform_output.transform_features_layer())


def _objects(cfg: TrainerConfig, task: str, plan: scaling.Plan, model, asynchronous: bool,
             kept: reuse.Kept, bagged):
    """(the fit before's objects this fit takes or None, then the model, schedule, optimizer,
    weights' average and metrics it trains): a refit takes the fit before's, set as built
    (trainer_module/reuse.py); else those of `model`, just built. A synchronous schedule's decay
    is read from variables (a Horizon), which early stopping's cooldown and a refit set. In the
    strategy's scope."""
    fitted = kept.take(plan, model, bagged[0] if bagged else None)
    if fitted:
        return (fitted, fitted.model, fitted.schedule, fitted.optimizer, fitted.average,
                fitted.metrics)
    schedule = build.schedule(plan, cooldown=not asynchronous)
    return (None, model, schedule, build.optimizer(cfg, schedule),
            weight_average.made(model, cfg.weight_average, synchronous=not asynchronous),
            build.metrics(task))


def _actions(job: TrainJob, plan: scaling.Plan, stopping, schedule) -> list:
    """Early stopping (if any), then the standard actions: summaries, log lines, progress."""
    return ([stopping] if stopping else []) + actions_lib.standard_actions(
        total_steps=plan.train_steps, global_batch=plan.global_batch,
        log_every=job.trainer.log_every, summary_dir=actions_lib.summary_dir(job.model_run_dir),
        learning_rate=lambda step: schedule(step))


def _train_to_end(controller, steps, job: TrainJob, chief: bool,
                  average=None) -> tuple[dict, float]:
    """The Controller run to its end: (its last logs, the seconds it took), the model then
    holding `average`'s weights, if given (a run whose scores kept none). After a SIGTERM
    every worker saved at one step; the chief parks the checkpoints where the next attempt at
    the job finds them (a failed execution's outputs are removed) and raises Preempted. What an
    earlier attempt parked is removed by the caller once the job (and its refit) ends."""
    tic = time.perf_counter()
    try:
        logs = controller.train(steps)
    except termination.Preempted as stopped:
        if not chief:
            raise
        raise termination.Preempted(stopped.step, resume.park(job, stopped.checkpoint),
                                    stopped.signalled) from None
    seconds = time.perf_counter() - tic
    if average:
        average.assign_to_model()
    return logs, seconds


def _evaluate_and_export(models: list, job: TrainJob, plan: scaling.Plan, raw_spec,
                         tf_transform_output, transform, target: str) -> dict:
    """The eval split's metrics ({} without one), and the serving model written to `target`
    (the tables split over the replicas whole: the served model has no strategy): the model, or
    a bag's mean of its members' (trainer_module/bag.py)."""
    members = [model_lib.unsharded(member) for member in models] if len(models) > 1 else None
    model = bag.averaged(members, job.task) if members else models[0]
    label_scaling = export.label_scaling(tf_transform_output, job.label, job.task)  # read once
    eval_metrics = (eval_split.evaluate(model, job, raw_spec, transform, job.task, plan,
                                        label_scaling[1])
                    if job.eval_files else {})
    logging.info("Eval: %s", eval_metrics)
    export.export_serving_model(model_lib.unsharded(model), tf_transform_output, job.label,
                                job.task, target, label_scaling,
                                weights_of=members[0] if members else None)
    return eval_metrics


def _elastic(job: TrainJob, plan: scaling.Plan, restored: scaling.Topology | None, start: int,
             model: tf.keras.Model) -> Elastic | None:
    """The account of a resume on another topology than the checkpoint's (None: the same one, or
    no checkpoint, or one from before checkpoints recorded it), logged."""
    if not restored or not start or scaling.Topology.of(plan) == restored:
        return None
    if restored.global_batch != plan.global_batch:  # the Controller passed over the newest
        raise RuntimeError(f"the checkpoint restored at step {start} was written with global "
                           f"batch {restored.global_batch}, the plan has {plan.global_batch}")
    normalized = [layer.name for layer in _layers(model)
                  if isinstance(layer, tf.keras.layers.BatchNormalization)]
    caveat = (f"batch statistics ({', '.join(normalized[:3])}) now come from micro-batches of "
              f"{plan.per_replica_batch}, not from {restored.per_replica_batch} rows: the weights "
              "are not those of an uninterrupted run"
              if normalized and plan.per_replica_batch != restored.per_replica_batch else "")
    elastic = Elastic(start, plan.replicas, restored.replicas, plan.accumulation_steps,
                      restored.accumulation_steps, plan.global_batch, plan.per_replica_batch,
                      plan.hosts, restored.hosts,
                      same_examples=(plan.hosts == restored.hosts
                                     or job.trainer.input_order == GLOBAL), caveat=caveat)
    logging.info("Elastic resume: %s", elastic.words())
    return elastic


def _layers(model: tf.keras.Model):
    """Every layer of the model, those inside nested models and layers too."""
    return [module for module in model.submodules if isinstance(module, tf.keras.layers.Layer)]


def _early_stopping(job: TrainJob, plan: scaling.Plan, rows: int | None, model, loss, best,
                    raw_spec, transform, scorer=None,
                    average=None) -> early_stopping.EarlyStopping:
    """The validation rows' score, every epoch of the fit rows (or a fortieth of the steps, or
    SCORE_EXAMPLES examples); a cooldown where patience runs out, where best has a horizon.
    scorer: a model on this process's device that scores instead, the weights copied into it
    once a score (asynchronous training: the parameter servers' variables are read once, not
    once a batch); the coordinator then stops scheduling steps, and every worker stops."""
    cfg = job.trainer
    validation = input_pipeline.make_dataset_fn(
        job.train_files, raw_spec, job.label, job.task, eval_split.EVAL_BATCH, training=False,
        transform=transform, part=input_pipeline.VALIDATION,
        validation_share=cfg.validation_share)(None)
    per_epoch = math.ceil(rows * (1 - cfg.validation_share) / plan.global_batch) if rows else 0
    score = early_stopping.validation_loss(scorer or model, loss, validation)
    if scorer is not None:
        score = early_stopping.on_copy(model, scorer, score)
    return early_stopping.EarlyStopping(
        model, best, score, early_stopping.every(plan.train_steps, per_epoch, plan.global_batch),
        cfg.patience, steps_per_epoch=per_epoch, cooldown_share=cfg.decay_share,
        chunk=_chunk(cfg, plan), train_rows=rows or 0, global_batch=plan.global_batch,
        weight_average=average)


def _chunk(cfg: TrainerConfig, plan: scaling.Plan) -> int:
    """Steps between the Controller's checkpoints and actions. Asynchronous: enough closures of
    steps_per_execution for every worker to be busy (the chunk ends when all are done)."""
    if plan.asynchronous:
        return cfg.steps_per_execution * plan.workers * parameter_server.CLOSURES_PER_WORKER
    return cfg.steps_per_execution


def _step_loop(job: TrainJob, strategy, plan: scaling.Plan, model, optimizer, loss, metrics,
               dataset_fn, average=None, fitted=None):
    """The synchronous step loop (loop.py), or the asynchronous one (parameter_server.py), over
    the input of `dataset_fn` (build.train_input); fitted: the fit before's objects a refit took
    (reuse.py), whose traced loop it trains on."""
    cfg = job.trainer
    if fitted:
        return fitted.steps.restart(strategy.distribute_datasets_from_function(dataset_fn))
    if parameter_server.is_parameter_server(strategy):
        return parameter_server.AsynchronousLoop(strategy, model, optimizer, loss, plan.global_batch,
                                             dataset_fn, metrics=metrics,
                                             steps_per_closure=cfg.steps_per_execution)
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    return loop.SynchronousLoop(strategy, model, optimizer, loss, plan.global_batch, dataset,
                        metrics=metrics,
                        jit_compile=scaling.compiled(cfg, strategy_lib.hardware(strategy)),
                        accumulation_steps=plan.accumulation_steps, weight_average=average)


def _local_copy(model: tf.keras.Model, inputs, strategy) -> tf.keras.Model:
    """The model built again on this process's own device, with the trained weights (its tables
    as `strategy` splits them, each whole here)."""
    copy = build.model(inputs, tf.distribute.get_strategy(), tables_of=strategy)
    copy.set_weights(sharded_embedding.whole_weights(model))
    return copy


def _asynchronous_summary(steps, plan: scaling.Plan) -> Asynchronous:
    return Asynchronous(plan.workers, plan.parameter_servers, steps.updates,
                        **steps.staleness())


def main(argv: list[str]) -> int:
    """`python -m trainer_module.train JOB [SUMMARY]`; a failure ends as error_line.report's."""
    logging.set_verbosity(logging.INFO)
    with open(argv[1]) as handle:
        job = TrainJob.from_json(handle.read())
    try:
        result = train_job(job)
    except Exception as err:  # noqa: BLE001 - reported in one line, with the status it means
        return error_line.report(err, "train")
    if len(argv) > 2:
        with open(argv[2], "w") as handle:
            json.dump(result.to_dict(), handle)
    return 0


if __name__ == "__main__":
    processes.entry_imports_done()  # runtime/__init__.py: its imports made uncollected
    sys.exit(main(sys.argv))
