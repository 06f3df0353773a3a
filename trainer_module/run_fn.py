"""TFX Trainer entry point, referenced by dotted path: `run_fn='trainer_module.run_fn.run_fn'`."""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf
from tfx.components.trainer.fn_args_utils import FnArgs

from trainer_module import parameter_server, train
from trainer_module.job import TrainJob
from trainer_module.settings import PARAMETER_SERVER
from trainer_module.custom_config import TRAIN_SPEC, TrainSpec
from trainer_module.summary import SUMMARY_FILE


def job_from_fn_args(fn_args: FnArgs) -> TrainJob:
    """The pipeline's TrainJob, its settings as the Trainer's executor decoded them once (with
    the run's parameters, components/trainer.py; decoded here from the custom_config where
    another executor ran run_fn). It has no eval files: the Evaluator that follows the
    Trainer measures the eval split (with TFMA, on the served model, the figures the run reports);
    a pass of the Trainer's own over the same rows cost a second or two and went nowhere but a log
    line."""
    return TrainJob(
        train_files=tuple(fn_args.train_files), eval_files=(),
        transform_dir=fn_args.transform_graph_path, model_run_dir=fn_args.model_run_dir,
        serving_model_dir=fn_args.serving_model_dir,
        spec=getattr(fn_args, TRAIN_SPEC, None) or TrainSpec.from_custom_config(
            fn_args.custom_config or {}),
        base_model=fn_args.base_model or "")


def run_fn(fn_args: FnArgs) -> None:
    """Trains, exports, and leaves what happened in <ModelRun>/training_summary.json.

    On a parameter-server cluster the Trainer runs in every task; its worker and ps tasks
    (TF_CONFIG) serve the chief's training until they are ended, and write nothing."""
    job = job_from_fn_args(fn_args)
    if job.trainer.strategy == PARAMETER_SERVER and parameter_server.is_server_task():
        parameter_server.serve()
        return
    summary = train.train_job(job)
    if summary.chief:
        summary = dataclasses.replace(summary, base_model=job.base_model)
        with tf.io.gfile.GFile(os.path.join(job.model_run_dir, SUMMARY_FILE), "w") as handle:
            json.dump(summary.to_dict(), handle, indent=2)
