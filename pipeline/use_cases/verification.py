"""`lockstep verify`: does the user's model, with their loss and preprocessing, train synchronously
right? The pipeline up to Transform (a partial LocalDagRunner run, cached like a whole run's),
then N replicas against Keras on one device on the same global batches (trainer_module/
equivalence.py), in a fresh process.

It reads local data only (a sample will do): remote data is refused before anything runs. It
trains no model to keep and pushes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline import errors
from pipeline.config import Config, ConfigError
from pipeline.use_cases import Say, local_run, preparing, quiet

if TYPE_CHECKING:
    from trainer_module.summary import Verification


def verify(config: Config, *, replicas: int = 2, steps: int = 3, workers: int = 1,
           optimizer: str = "sgd", log_file: str | None = None, lock: str | None = None,
           say: Say = quiet) -> Verification:
    """Prepares the run, then compares `replicas` emulated replicas against Keras on one device
    for `steps` global steps, in one process, or in `workers` processes with one replica each;
    with plain SGD, or the run's own optimizer (optimizer="run").

    Args:
      config: the config, absolutized.
      log_file: where library logs go (default: local_run.log_path(config)).
      lock: the run lock (default: <pipeline root>/run.lock).
      say: called with each line the data check says, before anything runs.
    Returns:
      the Verification: whether the updates agree within the tolerance, and its lines.
    Raises:
      ConfigError: remote data, or what prepare raises; run_lock.Locked; PipelineFailed.
    """
    prepared = preparing.prepare(config, serving=False)  # it pushes nothing
    for line in prepared.lines():
        say(line)
    if prepared.data is None:
        raise ConfigError(f"data.path {config.data.path} is remote: lockstep verify reads "
                          "local data (a sample of it will do)")
    return _compare(prepared, replicas, steps, workers, optimizer,
                    log_file or local_run.log_path(prepared.config), lock)


def _compare(prepared: preparing.Prepared, replicas: int, steps: int, workers: int,
             optimizer: str, log_file: str, lock: str | None) -> Verification:
    from pipeline.local import run_lock
    from pipeline.local.console import Console

    config = prepared.config
    try:
        with run_lock.hold(lock or run_lock.default_path(config.paths.pipeline_root),
                           config.run.lock_wait_seconds), Console(log_file, False) as console:
            from pipeline import definition  # TensorFlow & co., their logs to the file
            from pipeline.orchestrators import local_dag
            from trainer_module import verify_process
            from trainer_module.job import TrainJob

            report = local_dag.run_dag(prepared, console, to_node=definition.TRANSFORM_NODE)
    except Exception as err:  # noqa: BLE001  as a run: a component's error in one line
        if errors.status_of(err) is not None:  # the project's own: unchanged
            raise
        raise local_run.failure(err, "verify: the pipeline up to Transform failed",
                                config) from err
    examples = report.artifacts[f"{definition.EXAMPLE_GEN_NODE}.examples"]
    job = TrainJob(
        train_files=[f"{examples}/Split-train/*"], eval_files=[],
        transform_dir=report.artifacts[f"{definition.TRANSFORM_NODE}.transform_graph"],
        model_run_dir="", serving_model_dir="",
        spec=definition.train_spec(config, config.data.label, prepared.decisions.task))
    return verify_process.run_in_subprocess(job, replicas=replicas, steps=steps,
                                            workers=workers, optimizer=optimizer)
