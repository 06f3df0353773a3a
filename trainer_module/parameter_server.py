"""Asynchronous data parallelism: `trainer.strategy = "parameter_server"`.

Synchronous training (trainer_module/loop.py) makes one update per global step from the gradients
of every replica together. Here every worker makes its own updates: it reads the variables from
the parameter servers, takes the gradient of its own batch and applies it, while the others do
the same, without waiting for each other. A slow or lost worker costs only its own updates; the
price is staleness: between a worker's read and its update, other workers' updates land, so its
gradient was taken at weights that are no longer there. `AsynchronousLoop` counts it for every update
(a counter of its own on the parameter servers, read before the weights are read and incremented
after they are updated).

The pieces tf.distribute.ParameterServerStrategy needs, as this module does them:
- a ClusterCoordinator in the trainer's process (the chief) schedules steps on the workers;
  a worker that fails has its steps rescheduled on the others;
- the dataset is made on each worker by a dataset function (no sharding: each worker shuffles
  the whole training split with a seed of its own, trainer_module/input_pipeline.py);
- the Transform layer is made under the strategy's scope, outside the dataset function, so its
  tables are copied to every worker rather than looked up remotely (train.py);
- an embedding table past trainer.shard_embeddings_over is split by rows over the parameter
  servers (the strategy's variable partitioner, sharded_embedding.SERVER_SPLIT: only those
  tables); the model is exported, and scored for early stopping, from a copy on the chief with
  every table whole (tf.saved_model.load cannot load sharded variables).

Cluster: with TF_CONFIG naming parameter servers, that cluster (the chief is this process;
worker and ps tasks run `serve()`: `python -m trainer_module.parameter_server`, or the Trainer's
run_fn, which does the same on those tasks). Without it, a cluster on loopback of
`trainer.ps_workers` workers and `trainer.ps_servers` parameter servers in this process.

Connecting to a cluster changes the process's TensorFlow runtime for good, so a parameter-server
run trains in a process of its own (`run_in_subprocess`; train.run does this itself).
"""

from __future__ import annotations

import collections
import json
import logging as std_logging
import os
import subprocess
import sys

from absl import logging
import tensorflow as tf

from runtime import processes
from trainer_module import loop, sharded_embedding, strategy as strategy_lib
from trainer_module.job import TrainJob
from runtime.progress import PROGRESS_LOGGER
from trainer_module.summary import TrainingSummary

# Set in the process that trains (run_in_subprocess): train.run trains there, not again in a child.
TRAINER_PROCESS_ENV = "LOCKSTEP_PARAMETER_SERVER_TRAINER"
# That process's progress records (progress.Progress) cross to the parent as stderr lines with this
# prefix, and are logged again there, where a console may draw them.
PROGRESS_PREFIX = "lockstep-progress "
SERVER_TASKS = ("worker", "ps")
# Closures scheduled per worker between two joins (the Controller's chunk, train.py): every
# worker stays busy while the others finish theirs.
CLOSURES_PER_WORKER = 4


class ParameterServerError(RuntimeError):
    """The parameter-server cluster or its trainer process failed; one line says how."""


def _tf_config() -> dict:
    raw = os.environ.get("TF_CONFIG", "")
    try:
        return json.loads(raw) if raw else {}
    except json.JSONDecodeError as err:
        raise ParameterServerError(f"TF_CONFIG is not valid JSON: {err}") from None


def is_server_task() -> bool:
    """True in a worker or ps task of a TF_CONFIG cluster (those serve; the chief trains)."""
    task = _tf_config().get("task", {})
    return "ps" in _tf_config().get("cluster", {}) and task.get("type") in SERVER_TASKS


def serve() -> None:
    """Runs this TF_CONFIG task's server (worker or ps) until the process is ended."""
    config = _tf_config()
    task = config.get("task", {})
    if task.get("type") not in SERVER_TASKS:
        raise ParameterServerError(f"TF_CONFIG task {task!r} is not a worker or ps task")
    logging.info("Serving as %s %s", task["type"], task.get("index", 0))
    _server(tf.train.ClusterSpec(config["cluster"]), task["type"], int(task.get("index", 0)),
            workers=len(config["cluster"].get("worker", []))).join()


def _server(spec: tf.train.ClusterSpec, job: str, index: int, workers: int) -> tf.distribute.Server:
    config = tf.compat.v1.ConfigProto()
    if job == "worker":
        # A worker runs closures of several steps at once; too few inter-op threads hang it.
        config.inter_op_parallelism_threads = workers + 1
    else:
        config.device_count["GPU"] = 0
    return tf.distribute.Server(spec, job_name=job, task_index=index, config=config,
                                protocol="grpc", start=True)


_LOCAL_SERVERS: list = []  # in-process servers cannot be stopped: they live as long as the process


def local_cluster(workers: int, servers: int) -> tf.distribute.cluster_resolver.ClusterResolver:
    """A cluster on loopback: `workers` workers and `servers` parameter servers in this process."""
    ports = processes.free_ports(workers + servers)
    spec = tf.train.ClusterSpec({
        "worker": [f"localhost:{port}" for port in ports[:workers]],
        "ps": [f"localhost:{port}" for port in ports[workers:]]})
    _LOCAL_SERVERS.extend(_server(spec, "worker", i, workers) for i in range(workers))
    _LOCAL_SERVERS.extend(_server(spec, "ps", i, workers) for i in range(servers))
    return tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")


def make_strategy(cfg) -> tf.distribute.ParameterServerStrategy:
    """cfg: a TrainerConfig. TF_CONFIG's cluster, or a local one of cfg.ps_workers/ps_servers."""
    cluster = _tf_config().get("cluster", {})
    if "ps" in cluster:
        if not cluster.get("worker"):
            raise ParameterServerError("TF_CONFIG's cluster has parameter servers but no workers")
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    else:
        resolver = local_cluster(cfg.ps_workers, cfg.ps_servers)
    # Splits only the built-in model's large tables (build.table_shards); exported whole.
    strategy = tf.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=sharded_embedding.SERVER_SPLIT)
    workers, servers = strategy_lib.cluster_size(strategy)
    logging.info("Strategy: ParameterServerStrategy (asynchronous), %d workers, %d parameter "
                 "servers", workers, servers)
    return strategy


def is_parameter_server(strategy) -> bool:
    return isinstance(strategy, tf.distribute.ParameterServerStrategy)


class AsynchronousLoop(loop.SynchronousLoop):
    """The asynchronous step, scheduled on the workers by a ClusterCoordinator.

    Each scheduled closure runs up to `steps_per_closure` steps on one worker (fewer round trips
    than one closure a step); train(n) schedules n steps, waits for all of them and returns their
    mean loss, the metrics, and the staleness of the run's updates so far: for each update, how
    many updates other workers applied between this worker's read of the weights (the forward
    pass) and its own update.

    The loss is the synchronous one on one worker's batch: per-example losses / that batch
    (`global_batch` here: the batch of one update), gradients, one apply_gradients.
    """

    def __init__(self, strategy, model, optimizer, per_example_loss, batch: int, dataset_fn, *,
                 metrics=None, steps_per_closure: int = 10):
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        per_worker = self.coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn))
        super().__init__(strategy, model, optimizer, per_example_loss, batch, per_worker,
                         metrics=metrics)
        with strategy.scope():  # on a parameter server, as the weights are
            self._updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.steps_per_closure = max(steps_per_closure, 1)
        # The updates that landed on the parameter servers: the optimizer's step count since the
        # first train(). A worker killed in the middle of a closure may have applied some of its
        # steps before it died; the coordinator runs that closure again on another worker, so
        # more updates land than the closures that finished counted (the loop's step, the
        # optimizer's count, then schedules fewer later: the run still makes its steps).
        self.updates = 0
        self._first_update: int | None = None
        self._counted = 0  # the finished closures' updates, whose staleness was read
        self.staleness_total = 0
        self.staleness_max = 0

    def _replica_step(self, inputs):
        # Ops on different variables run in no set order inside a step (only ops on one variable
        # keep program order), and the optimizer's own step counter is incremented with no
        # dependence on the weight updates: it can land before them. So the staleness is read
        # off a counter of our own, read before the weights are (control dependencies) and
        # incremented after every weight has been updated (a read of each, after its update).
        x, y = inputs
        read = self._updates.read_value()
        with tf.control_dependencies([read]):
            # A table split over the servers is a ShardedVariable: its gradient, its parts'.
            grads, _, loss, outputs = self._gradients(x, y)
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(zip(grads, variables))
        with tf.control_dependencies([v.read_value() for v in variables]):
            applied = self._updates.assign_add(1)
        # The updates that landed between the read and this one, which counted itself.
        stale = tf.maximum(applied - read - 1, 0)
        self._update_metrics(y, outputs)
        return loss, tf.linalg.global_norm(grads), stale

    def _run_steps(self, iterator, num_steps):
        """One host call's updates (loop.steps_while_finite), the staleness sums its state."""

        def step(stale):
            loss, norm, now = self.strategy.run(self._replica_step, args=(next(iterator),))
            last = self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
            norm = self.strategy.reduce(tf.distribute.ReduceOp.SUM, norm, axis=None)
            # A worker's replicas (its GPUs) make one update together: one count.
            now = self.strategy.experimental_local_results(now)[0]
            return last, norm, tf.constant(False), (stale[0] + now, tf.maximum(stale[1], now))

        total, last, done, _, (stale_sum, stale_max) = loop.steps_while_finite(
            num_steps, step, (tf.constant(0, tf.int64), tf.constant(0, tf.int64)))
        return total, last, done, stale_sum, stale_max

    def train(self, num_steps: int) -> dict[str, float]:
        """Schedules num_steps updates, waits for them; NonFiniteLoss when one went bad."""
        if self._first_update is None:
            self._first_update = int(self.optimizer.iterations.numpy())
        results = []
        left = num_steps
        while left > 0:
            steps = min(self.steps_per_closure, left)
            results.append(self.coordinator.schedule(
                self._loop, args=(self._iterator, tf.constant(steps))))
            left -= steps
        self.coordinator.join()
        total, done, bad = 0.0, 0, None
        for result in results:
            chunk_total, last, chunk_done, stale_sum, stale_max = result.fetch()  # numpy
            total, done = total + float(chunk_total), done + int(chunk_done)
            self.staleness_total += int(stale_sum)
            self.staleness_max = max(self.staleness_max, int(stale_max))
            if not tf.math.is_finite(last):
                bad = float(last)
        self._counted += done
        self.updates = int(self.optimizer.iterations.numpy()) - self._first_update
        if bad is not None:
            raise loop.NonFiniteLoss(
                f"loss or gradient became {bad} by update {int(self.optimizer.iterations.numpy())};"
                " training stopped (lower the learning rate or check the data)")
        logs = {"loss": total / max(done, 1), "steps": done, **self.staleness()}
        for key, metric in self.metrics.items():
            logs[key] = float(metric.result())
            metric.reset_state()
        return logs

    def staleness(self) -> dict[str, float]:
        """The run's staleness so far: mean and max updates by others between read and update."""
        return {"staleness_mean": self.staleness_total / max(self._counted, 1),
                "staleness_max": self.staleness_max}


class _ProgressToStderr(std_logging.Handler):
    def emit(self, record: std_logging.LogRecord) -> None:
        progress = getattr(record, "progress", None)
        if progress is not None:
            sys.stderr.write(PROGRESS_PREFIX + json.dumps(progress) + "\n")
            sys.stderr.flush()


def relay_progress() -> None:
    """In the process run_in_subprocess starts: its progress records go to the parent too."""
    logger = std_logging.getLogger(PROGRESS_LOGGER)
    logger.setLevel(std_logging.INFO)
    if not any(isinstance(h, _ProgressToStderr) for h in logger.handlers):
        logger.addHandler(_ProgressToStderr())


def _relay(line: str) -> None:
    """A line of the trainer process's stderr, passed on: a progress record is logged again."""
    if line.startswith(PROGRESS_PREFIX):
        progress = json.loads(line[len(PROGRESS_PREFIX):])
        std_logging.getLogger(PROGRESS_LOGGER).info(
            "step %d/%d", progress["step"], progress["total"], extra={"progress": progress})
    else:
        sys.stderr.write(line)


def run_in_subprocess(job: TrainJob) -> TrainingSummary:
    """Trains a TrainJob with `python -m trainer_module.train` in a fresh process (the job crosses
    as its JSON, trainer_module/job.py) and returns its summary. Its log lines pass through to this
    process's stderr; a failure is a
    ParameterServerError with its last line (train.main's one line naming the error)."""
    import tempfile

    env = processes.python_env(TF_USE_LEGACY_KERAS="1", **{TRAINER_PROCESS_ENV: "1"})
    with tempfile.TemporaryDirectory(prefix="lockstep-ps-") as tmp:
        job_path, out_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "summary.json")
        with open(job_path, "w") as handle:
            handle.write(job.to_json())
        child = subprocess.Popen([sys.executable, "-m", "trainer_module.train", job_path, out_path],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
        last = collections.deque(maxlen=1)
        try:
            for line in child.stderr:
                _relay(line)
                if line.strip() and not line.startswith(PROGRESS_PREFIX):
                    last.append(line.strip())
            child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if child.returncode != 0 or not os.path.exists(out_path):
            raise ParameterServerError(
                f"the parameter-server trainer exited with status {child.returncode}: "
                f"{last[0].removeprefix('train: ') if last else 'no output'}")
        with open(out_path) as handle:
            return TrainingSummary.from_dict(json.load(handle))


def main() -> int:
    """`python -m trainer_module.parameter_server`: serve this TF_CONFIG task (worker or ps)."""
    logging.set_verbosity(logging.INFO)
    try:
        serve()
    except ParameterServerError as err:
        print(f"parameter_server: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    processes.entry_imports_done()  # runtime/__init__.py: its imports made uncollected
    sys.exit(main())
