"""The Trainer's own pass over the eval split, where a TrainJob names eval files (the tests,
`python -m trainer_module.train`): accuracy, or a regression's RMSE in the label's units. The
pipeline's Trainer has none: the Evaluator that follows it measures the eval split with TFMA, on
the served model (trainer_module/run_fn.py)."""

from __future__ import annotations

import tensorflow as tf

from trainer_module import input_pipeline
from trainer_module.job import TrainJob
from trainer_module.settings import CLASSIFICATION

EVAL_BATCH = 4096  # eval rows per step: one compiled call per batch, not one eager call per 32


def evaluate(model, job: TrainJob, raw_spec, transform, task, plan, scale: float) -> dict:
    """{"accuracy" or "rmse": its figure on the eval split}; scale: the label's (a regression's
    RMSE in its units: export.label_scaling)."""
    ds = input_pipeline.make_dataset_fn(job.eval_files, raw_spec, job.label, task,
                                        max(plan.global_batch, EVAL_BATCH), training=False,
                                        transform=transform)(None)
    if task == CLASSIFICATION:
        metric = tf.keras.metrics.SparseCategoricalAccuracy()
        name = "accuracy"
    else:
        metric = tf.keras.metrics.RootMeanSquaredError()
        name = "rmse"

    @tf.function
    def update(x, y):
        metric.update_state(y, model(x, training=False))

    for x, y in ds:
        update(x, y)
    # A regression's labels and outputs are standardized (Transform): the RMSE in the label's units.
    return {name: float(metric.result()) * (scale if name == "rmse" else 1.0)}
