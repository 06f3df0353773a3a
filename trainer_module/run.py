"""TFX Trainer entry point, referenced by dotted path: `run_fn='trainer_module.run.run_fn'`."""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf
from tfx.components.trainer.fn_args_utils import FnArgs

from pipeline.config import TrainerConfig
from trainer_module import train


def job_from_fn_args(fn_args: FnArgs) -> train.TrainJob:
    custom = fn_args.custom_config or {}
    names = {f.name for f in dataclasses.fields(TrainerConfig)}
    trainer_cfg = TrainerConfig(**{k: v for k, v in custom.get("trainer", {}).items() if k in names})
    if fn_args.train_steps:
        trainer_cfg.train_steps = fn_args.train_steps
    return train.TrainJob(
        train_files=list(fn_args.train_files), eval_files=list(fn_args.eval_files),
        transform_dir=fn_args.transform_graph_path, model_run_dir=fn_args.model_run_dir,
        serving_model_dir=fn_args.serving_model_dir, label=custom["label"], trainer=trainer_cfg,
        base_model=fn_args.base_model or "")


SUMMARY_FILE = "training_summary.json"


def run_fn(fn_args: FnArgs) -> None:
    """Trains, exports, and leaves what happened in <ModelRun>/training_summary.json."""
    job = job_from_fn_args(fn_args)
    summary = train.run(job)
    if summary["chief"]:
        summary["base_model"] = job.base_model
        with tf.io.gfile.GFile(os.path.join(job.model_run_dir, SUMMARY_FILE), "w") as handle:
            json.dump(summary, handle, indent=2, default=str)
