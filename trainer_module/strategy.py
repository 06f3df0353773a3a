"""One function picks the tf.distribute strategy from config and environment.

Order, for `strategy = "auto"`: a TPU when one is named (config or $TPU_NAME), several machines when
TF_CONFIG names a cluster, GPUs when there are any, else the CPU: the default strategy, or N
emulated replicas (the CPU split into N logical devices under MirroredStrategy) to study
multi-replica behaviour on a laptop.

`strategy = "parameter_server"` is asynchronous training on a cluster of workers and parameter
servers: trainer_module/parameter_server.py makes that strategy, above this module.

A synchronous strategy's replicas' gradients are summed here too (`sum_over_replicas`, in
float64), so the sum is the same whichever strategy adds them and in whatever order: N worker
processes (Vertex AI's GPU machines, a TF_CONFIG cluster) update as N replicas in one process do.
"""

from __future__ import annotations

import contextlib
import json
import os

from absl import logging
import tensorflow as tf

from trainer_module import tf_internals
from trainer_module.autograph_rules import plain


class StrategyError(RuntimeError):
    """The asked-for strategy cannot be had here; the message says what was asked and why."""


def configure_emulated_replicas(n: int) -> None:
    """Split the CPU into n logical devices; must run before TensorFlow's runtime starts."""
    if n <= 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have != n:
            raise StrategyError(
                f"emulate_replicas={n}, but TensorFlow already started with {have} CPU device(s); "
                "set it before any TensorFlow op runs (lockstep run does this itself)") from None


def _tf_config_cluster() -> dict:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}
    try:
        return json.loads(raw).get("cluster", {}) or {}
    except json.JSONDecodeError as err:
        raise StrategyError(f"TF_CONFIG is not valid JSON: {err}") from None


def _tpu_strategy(name: str, zone: str, project: str):
    """name: "local" (the chips of this host), a TPU's name, or "" for the one the environment
    names (TPU_NAME, or Vertex AI's TPU_CONFIG on a multi-host slice: one process drives every
    host, and each host's input pipeline reads its own share, trainer_module/input_pipeline.py)."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=name or None, zone=zone or None, project=project or None)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as err:
        raise StrategyError(f"TPU {name!r} is not reachable: {str(err).splitlines()[0]}") from None
    return tf.distribute.TPUStrategy(resolver)


def resolve_strategy(cfg) -> tf.distribute.Strategy:
    """cfg: a TrainerConfig (or anything with its strategy/tpu/emulate_replicas fields)."""
    kind = cfg.strategy
    if kind == "parameter_server":
        raise StrategyError("strategy parameter_server is made by "
                            "trainer_module.parameter_server.make_strategy")
    tpu_name = cfg.tpu or os.environ.get("TPU_NAME", "")
    if kind == "auto" and getattr(cfg, "tpu_slice", ""):
        kind = "tpu"  # the config names a slice: its chips (this host's, or Vertex AI's hosts)
    strategy = None
    if kind == "tpu" or (kind == "auto" and tpu_name):
        # No name: the environment's multi-host slice (Vertex AI's TPU_CONFIG), else this host's.
        if not tpu_name and not os.environ.get("TPU_CONFIG"):
            tpu_name = "local"
        try:
            strategy = _tpu_strategy(tpu_name, cfg.tpu_zone, cfg.tpu_project)
            kind = "tpu"
        except StrategyError as err:
            if not cfg.allow_fallback:
                raise StrategyError(f"{err} (set trainer.allow_fallback = true to fall back)") from None
            logging.warning("%s; falling back to the next strategy", err)
            kind = "auto"
    cluster = _tf_config_cluster()
    if strategy is None and (kind == "multi_worker" or (
            kind == "auto" and sum(len(v) for v in cluster.values()) > 1)):
        if not cluster:
            raise StrategyError("strategy multi_worker needs TF_CONFIG with a cluster")
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        kind = "multi_worker"
    if strategy is None and kind in ("auto", "mirrored") and cfg.emulate_replicas <= 1:
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            strategy = tf.distribute.MirroredStrategy([d.name for d in gpus])
            kind = "mirrored"
        elif kind == "mirrored":
            raise StrategyError("strategy mirrored asked for, but no GPU is visible")
    if strategy is None:
        if cfg.emulate_replicas > 1:
            configure_emulated_replicas(cfg.emulate_replicas)
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
            # Reduce through one device: CPU collectives are neither faster here nor needed.
            strategy = tf.distribute.MirroredStrategy(
                devices[: cfg.emulate_replicas],
                cross_device_ops=tf.distribute.ReductionToOneDevice())
            kind = f"cpu x{cfg.emulate_replicas} emulated replicas"
        else:
            strategy = tf.distribute.get_strategy()
            kind = "cpu (default strategy)"
    logging.info("Strategy: %s (%s), num_replicas_in_sync=%d",
                 name(strategy), kind, strategy.num_replicas_in_sync)
    return strategy


# The strategies by the names users know them from TensorFlow's documentation; the default
# strategy (no tf.distribute at all) and OneDeviceStrategy are "one device".
_NAMES = {"_DefaultDistributionStrategy": "one device", "OneDeviceStrategy": "one device",
          "TPUStrategyV2": "TPUStrategy", "MirroredStrategyV2": "MirroredStrategy",
          "ParameterServerStrategyV2": "ParameterServerStrategy",
          "CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy"}


def name(strategy) -> str:
    """The strategy as users know it: TPUStrategy, MirroredStrategy, MultiWorkerMirroredStrategy,
    ParameterServerStrategy or "one device" (never an internal class name)."""
    return _NAMES.get(type(strategy).__name__, type(strategy).__name__)


@plain  # traced as written: trainer_module/autograph_rules.py
def cluster_size(strategy) -> tuple[int, int]:
    """(workers, parameter servers) of a ParameterServerStrategy."""
    spec = tf_internals.cluster_spec(strategy)
    return len(spec.get("worker", [])), len(spec.get("ps", []))


def is_tpu(strategy) -> bool:
    return isinstance(strategy, (tf.distribute.TPUStrategy,))


def hardware(strategy) -> str:
    """What one replica is: "tpu", "gpu" or "cpu" (the default batch depends on it)."""
    if is_tpu(strategy):
        return "tpu"
    try:
        devices = strategy.extended.worker_devices
    except (AttributeError, RuntimeError, NotImplementedError):  # the default strategy: the CPU
        devices = ()
    return "gpu" if any("GPU" in str(d).upper() for d in devices) else "cpu"


def hosts(strategy) -> int:
    """The input pipelines that feed the replicas: a TPU slice's hosts, a multi-worker cluster's
    workers, else 1 (tf.distribute calls the dataset function once for each)."""
    if is_tpu(strategy):
        return int(getattr(strategy.extended, "num_hosts", 1) or 1)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        spec = strategy.cluster_resolver.cluster_spec().as_dict()
        return max(len(spec.get("worker", [])) + len(spec.get("chief", [])), 1)
    return 1


def is_chief(strategy) -> bool:
    """True where this process should write the exported model (the chief, or the only worker)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict())


def quiet_device_iterators() -> None:
    """The per-device input of a distributed dataset without tf.data's autotuning (idempotent).

    A synchronous strategy's input (`distribute_datasets_from_function`) is a MultiDeviceIterator:
    one host pipeline and, per replica, a small dataset that takes that replica's batches from it
    (a generator and a prefetch of one). Each per-device iterator is autotuned by default, which
    gives it a model thread that wakes at intervals doubling up to a minute. In TensorFlow 2.16
    an iterator's destruction waits for that thread's next wake-up: it is not woken. The per-device
    iterators are destroyed one after the other, and while one is waited for, the intervals of
    the others keep doubling: freeing the input of 8 replicas took minutes, on the thread that
    freed it, holding the GIL (a `gc.collect()` between tests, the Trainer's own at its end:
    components/memory.py). Measured (the tests' train loop, 40 rounds of 1 to 8 replicas and 1
    to 5 steps, a collection after each): 113.7 s of collections, the longest 40.8 s, against
    8.0 s and 0.26 s with this. Nothing there has anything to tune (the prefetch is of one
    element); the host pipeline runs untuned too (trainer_module/input_pipeline.py, `untuned`)."""
    tf_internals.untune_device_datasets()


@plain  # traced as written: trainer_module/autograph_rules.py
def summing_dtype(strategy) -> tf.DType:
    """What the replicas' gradients are summed in: float64, in which the sum of a few float32
    gradients is exact, so the same whatever order the strategy adds them in; float32 on a TPU,
    which has no float64.

    Why it matters: MirroredStrategy adds its replicas' gradients on one device in replica order,
    MultiWorkerMirroredStrategy in a ring across the worker processes, chunk by chunk, in
    another; in float32 the two sums differ in their last bit, and so do the weights after one
    step (1.5e-8). That is harmless until a ReLU's input lands within that bit of zero for some
    example: its gate is open on one side and shut on the other, that example's gradient through
    the unit is in one sum and not the other, and Adam, which scales each weight's step by its
    own gradient's size, turns it into a visible step (measured on penguins, AdamW, 4 workers
    against 4 replicas in one process: example 17's unit 76 at +2.7e-9 against -5.1e-9 at step 3,
    7.1e-5 after it, 2.6e-3 after 24 steps). Summed exactly, N worker processes make bit for bit
    the update N replicas in one process make (docs/training.md, "Several GPU machines")."""
    return tf.float32 if is_tpu(strategy) else tf.float64


def widened(grad, wide: tf.DType) -> tf.Tensor:
    """A gradient as a dense tensor in `wide` (summing_dtype): embedding rows (IndexedSlices)
    added up per row in it, so rows that several micro-batches share add up as they do when
    the replicas' rows are gathered (sum_over_replicas)."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.math.unsorted_segment_sum(tf.cast(grad.values, wide), grad.indices,
                                            grad.dense_shape[0])
    return tf.cast(grad, wide)


def as_rows(dense: tf.Tensor) -> tf.IndexedSlices:
    """An embedding's accumulated gradient as rows again, so that the optimizer updates it as it
    updates a replica's gathered rows (Adam's sparse update rounds otherwise than its dense one):
    all its rows, a fixed shape on every replica (a collective inside the step's loop refuses
    shapes that differ between worker processes), so an accumulating replica sends its table's
    size, not the rows its micro-batches touched."""
    rows = tf.range(tf.shape(dense, out_type=tf.int64)[0])
    return tf.IndexedSlices(dense, rows, tf.shape(dense, out_type=tf.int64))


@plain  # traced as written: trainer_module/autograph_rules.py
def _narrowed(grad, dtype: tf.DType):
    """A summed gradient back in its variable's dtype; embedding rows each once, their values
    added up before (in the wide dtype they come in)."""
    if not isinstance(grad, tf.IndexedSlices):
        return tf.cast(grad, dtype)
    rows, where = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, where, tf.shape(rows)[0])
    return tf.IndexedSlices(tf.cast(values, dtype), rows, grad.dense_shape)


@plain  # traced as written: trainer_module/autograph_rules.py
def sum_over_replicas(strategy, grads: list, variables: list) -> list:
    """The replicas' gradients summed (in a replica context), in each variable's dtype: dense
    ones added in summing_dtype; embedding rows (IndexedSlices) gathered from the replicas, as the
    strategy gathers them, and each row's values added in summing_dtype. The same sums, bit for
    bit, for any split of the global batch into replicas and micro-batches of the same per-replica
    batch (a worker process a replica, or all in one process; an elastic resume's accumulation).
    None stays None."""
    wide = summing_dtype(strategy)
    out = [g if g is None or isinstance(g, tf.IndexedSlices) else tf.cast(g, wide) for g in grads]
    out = [tf.IndexedSlices(tf.cast(g.values, wide), g.indices, g.dense_shape)
           if isinstance(g, tf.IndexedSlices) else g for g in out]
    if strategy.num_replicas_in_sync > 1:
        context = tf.distribute.get_replica_context()
        for kind in (False, True):  # dense, then sparse: each kind in one all-reduce
            places = [i for i, g in enumerate(out)
                      if g is not None and isinstance(g, tf.IndexedSlices) == kind]
            if places:
                summed = context.all_reduce(tf.distribute.ReduceOp.SUM, [out[i] for i in places])
                for i, value in zip(places, summed):
                    out[i] = value
    return [None if g is None else _narrowed(g, v.dtype) for g, v in zip(out, variables)]


@contextlib.contextmanager
def one_device(strategy, device: str):
    """Variables made inside are plain ones on `device` (a block of a sharded table,
    trainer_module/sharded_embedding.py), not one copy per replica, though the strategy's scope
    is open: MirroredStrategy's (and its multi-worker and TPU kinds') variable creator makes a
    plain variable where it is asked to colocate with one device."""
    if not tf.distribute.has_strategy():
        with tf.device(device):
            yield
        return
    def creator(next_creator, **kwargs):
        kwargs["colocate_with"] = tf_internals.one_device_colocation(device)
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def first_replica(strategy) -> int:
    """The replica id of this process's first replica: 0 in one process; under
    MultiWorkerMirroredStrategy, this worker's place in the cluster (the chief first, then the
    workers by index) times its replicas."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 0
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    place = 0 if resolver.task_type == "chief" else int(resolver.task_id) + ("chief" in spec)
    return place * len(strategy.extended.worker_devices)

