"""The wall for TensorFlow (components/compat/ is TFX's and the others', where trainer_module cannot
reach): every name of TensorFlow that is not its public API and that lockstep uses, and every one
it rebinds, here only, each in a function that says why. Outside this module no file uses a
`tensorflow.python` module, `tf.__internal__` or a private name of TensorFlow or tf-keras
(tools/private_names.py, `make lint`). SYMBOLS names each one; tests/test_compat.py resolves them
against the installed TensorFlow, so an upgrade that moves one is named with its version.

Each import is made where it is used: a module that imports this one (runtime/processes.py)
may not load TensorFlow, and the Kubeflow compile imports some with TensorFlow's stand-ins.
"""

from __future__ import annotations

import contextlib

_AUTOGRAPH = "tensorflow.python.autograph.core.config"
_DEVICE_DATASETS = "tensorflow.python.data.ops.multi_device_iterator_ops"
_CHECKPOINTS = "tensorflow.python.checkpoint.checkpoint_management"
_TRANSPILER = "tensorflow.python.autograph.pyct.transpiler"
# (module, name, the module that looks a rebound name up as it runs): each internal or private
# name used below; "A.b" is a member b of A.
SYMBOLS = (
    (_AUTOGRAPH, "CONVERSION_RULES", "tensorflow.python.autograph.impl.conversion"),
    (_AUTOGRAPH, "DoNotConvert", ""),
    (_DEVICE_DATASETS, "_create_device_dataset", _DEVICE_DATASETS),
    ("tensorflow.python.distribute.numpy_dataset", "SingleDevice", ""),
    ("tensorflow.python.training.saving.saveable_object", "SaveableObject", ""),
    ("tensorflow.python.training.saving.saveable_object", "SaveSpec", ""),
    ("tensorflow.python.training.saving.saveable_object_util", "ResourceVariableSaveable", ""),
    (_CHECKPOINTS, "update_checkpoint_state_internal", ""),
    (_CHECKPOINTS, "CheckpointManager._last_checkpoint_step", ""),
    ("tensorflow.python.eager.context", "context_safe", ""),
    ("tensorflow.python.distribute.parameter_server_strategy_v2",
     "ParameterServerStrategyV2._cluster_resolver", ""),
    (_TRANSPILER, "PyToPy.transform_function", ""),
    ("tensorflow", "__internal__.distribute.ShardedVariable", ""),
    ("tensorflow", "__internal__.tracking.Trackable", ""),
    ("tensorflow", "__internal__.decorator.make_decorator", ""),
    ("tensorflow", "__internal__.autograph.tf_convert", ""),
    ("tensorflow.python.autograph.core.ag_ctx", "ControlStatusCtx", ""),
    ("tensorflow.python.autograph.core.ag_ctx", "Status.ENABLED", ""),
)


# --- AutoGraph (trainer_module/autograph_rules.py) ---------------------------------------------

def _autograph():
    from tensorflow.python.autograph.core import config

    return config


def unconverted_rules(module: str) -> int:
    """How many of AutoGraph's rules leave `module`'s functions as they are (DoNotConvert)."""
    config = _autograph()
    return sum(isinstance(rule, config.DoNotConvert) and rule.matches(module)
               for rule in config.CONVERSION_RULES)


def left_unconverted(module: str) -> bool:
    """Whether AutoGraph leaves `module`'s functions as they are."""
    return unconverted_rules(module) > 0


def leave_unconverted(module: str) -> None:
    """AutoGraph's rules with one more first: `module`'s functions traced as written. TensorFlow
    publishes no way to add one; its own list names the packages it leaves alone."""
    if not left_unconverted(module):
        config = _autograph()
        config.CONVERSION_RULES = (config.DoNotConvert(module),) + tuple(config.CONVERSION_RULES)


def convert_again(module: str) -> None:
    """Takes `module`'s DoNotConvert rules out (benchmarks/trace_cost.py measures without)."""
    config = _autograph()
    config.CONVERSION_RULES = tuple(
        rule for rule in config.CONVERSION_RULES
        if not (isinstance(rule, config.DoNotConvert) and rule.matches(module)))


def make_decorator(target, decorator):
    """TensorFlow's own decorator wrapper: `decorator` keeps `target`'s signature for
    TensorFlow's inspection (Keras reads a layer's `call` that way)."""
    import tensorflow as tf

    return tf.__internal__.decorator.make_decorator(target, decorator)


def conversion_enabled():
    """A context in which Keras converts a layer's `call` with AutoGraph, as it does in a
    converted trace: a tf.function with autograph=False disables it for everything it calls."""
    from tensorflow.python.autograph.core import ag_ctx

    return ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED)


def converted(function):
    """`function` converted by AutoGraph wherever it is called, in a trace that converts nothing
    else (a tf.function with autograph=False): TensorFlow's `tf_convert` with the status
    enabled, as Keras applies it to a layer's `call`. A function marked do-not-convert is
    returned as it is."""
    import tensorflow as tf

    return tf.__internal__.autograph.tf_convert(function, conversion_enabled())


@contextlib.contextmanager
def conversions_counted(seen):
    """Inside the block, each function AutoGraph converts is counted in `seen` (a Counter) by
    (module, qualified name): tests/test_autograph_rules.py."""
    from tensorflow.python.autograph.pyct import transpiler

    original = transpiler.PyToPy.transform_function

    def counting(self, fn, user_context):
        seen[(getattr(fn, "__module__", "") or "", getattr(fn, "__qualname__", ""))] += 1
        return original(self, fn, user_context)

    transpiler.PyToPy.transform_function = counting
    try:
        yield seen
    finally:
        transpiler.PyToPy.transform_function = original


# --- tf.distribute (trainer_module/strategy.py, sharded_embedding.py) --------------------------

def untune_device_datasets() -> None:
    """The per-device datasets a synchronous strategy makes from each input pipeline, made
    without tf.data's autotuning (strategy.quiet_device_iterators says why). They are made by a
    private function of tf.data's multi-device iterator, looked up there each time: it is
    wrapped, once per process."""
    import tensorflow as tf
    from tensorflow.python.data.ops import multi_device_iterator_ops as device_iterators

    make = device_iterators._create_device_dataset
    if getattr(make, "lockstep_quiet", False):
        return

    def quiet(*args, **kwargs):
        options = tf.data.Options()
        options.autotune.enabled = False
        return make(*args, **kwargs).with_options(options)

    quiet.lockstep_quiet = True
    device_iterators._create_device_dataset = quiet


def device_datasets_untuned() -> bool:
    """Whether `untune_device_datasets` is in place (tests)."""
    from tensorflow.python.data.ops import multi_device_iterator_ops as device_iterators

    return bool(getattr(device_iterators._create_device_dataset, "lockstep_quiet", False))


def one_device_colocation(device: str):
    """What a variable creator's `colocate_with` takes to make a plain variable on `device`
    inside a strategy's scope (MirroredStrategy's creator makes one there)."""
    from tensorflow.python.distribute import numpy_dataset

    return numpy_dataset.SingleDevice(device)


def cluster_spec(strategy) -> dict:
    """A ParameterServerStrategy's cluster ({job: [addresses]}): it publishes none."""
    return strategy._cluster_resolver.cluster_spec().as_dict()


def sharded_variable_type():
    """tf.distribute's ShardedVariable, what ParameterServerStrategy's partitioner makes."""
    import tensorflow as tf

    return tf.__internal__.distribute.ShardedVariable


def trackable_base():
    """The base class of what a tf.train.Checkpoint tracks and saves by its own saveables."""
    import tensorflow as tf

    return tf.__internal__.tracking.Trackable


def whole_saveable(name: str, read, shape: list[int], restore):
    """A checkpoint's saveable of one float32 tensor of `shape` named `name`, read by `read()`
    at save time and handed to `restore(value)` when restored."""
    import tensorflow as tf
    from tensorflow.python.training.saving import saveable_object

    class Whole(saveable_object.SaveableObject):
        def __init__(self):
            spec = saveable_object.SaveSpec(read, "", name, dtype=tf.float32, device="/cpu:0")
            super().__init__(None, [spec], name)

        def restore(self, restored_tensors, restored_shapes):
            del restored_shapes
            restore(tf.ensure_shape(restored_tensors[0], shape))
            return tf.no_op()

    return Whole()


def slice_saveable(variable, full_shape: list[int], offset: list[int], name: str):
    """A checkpoint's saveable of `variable` as the slice at `offset` of one tensor of
    `full_shape` named `name`, as ShardedVariable saves its shards."""
    import tensorflow as tf
    from tensorflow.python.training.saving import saveable_object_util

    info = tf.Variable.SaveSliceInfo(full_name=name, full_shape=list(full_shape),
                                     var_offset=list(offset),
                                     var_shape=variable.shape.as_list())
    return saveable_object_util.ResourceVariableSaveable(variable, info.spec, name)


# --- checkpoints (trainer_module/controller.py) -------------------------------------------------

def count_checkpoint_interval_from(manager, step: int) -> None:
    """A CheckpointManager's interval counted from `step`, as if it had saved there: it counts
    from its last save or restore, and publishes no way to set it."""
    manager._last_checkpoint_step = step


def write_checkpoint_state(directory: str, latest: str, paths: list[str], timestamps: list[float],
                           last_preserved_timestamp: float) -> None:
    """The directory's `checkpoint` state file with these checkpoints (tf.train publishes the
    reading of it, not the writing)."""
    from tensorflow.python.checkpoint import checkpoint_management

    checkpoint_management.update_checkpoint_state_internal(
        directory, latest, all_model_checkpoint_paths=paths,
        all_model_checkpoint_timestamps=timestamps,
        last_preserved_timestamp=last_preserved_timestamp)


# --- processes (runtime/processes.py) ----------------------------------------------------

def eager_context_made() -> bool:
    """Whether TensorFlow's eager context exists in this process (its thread pools with it)."""
    from tensorflow.python.eager import context

    return context.context_safe() is not None
