"""tf-keras and tf.Transform stay out of AutoGraph's conversion, as Keras always did.

AutoGraph converts every function a `tf.function` calls unless its module is on TensorFlow's
do-not-convert list. That list names `keras`, but TensorFlow 2.16 does not name `tf_keras`, the
legacy Keras this project runs (trainer_module/__init__.py): so each trace of a train step,
an eval step or the serving signature rewrote Keras' own `Layer.__call__`, input checks and
optimizer internals through the AST, once per layer call. On a model with a hundred inputs
that was most of the Trainer's time, in tracing alone. Later TensorFlow releases add the same
rule. User code is still converted: Keras itself converts a subclassed layer's `call` when the
enclosing function runs under AutoGraph.

tf.Transform's library is written to trace without AutoGraph: it traces its own transform
graph with `autograph=False` (`impl_helper`, `saved_transform_io_v2`), and its TF1 mode has no
AutoGraph at all. Yet a dataset map or a serving signature that calls its TransformFeaturesLayer
converted that layer's code path (`supply_missing_inputs`, the saved-model loader's helpers: about
forty functions) through the AST in every such trace: about a second of each Trainer.

`install()` adds the rules (idempotent); the modules that trace Keras or the transform layer call
it when imported (loop.py, export.py, input_pipeline.py), and so does the Evaluator's executor
(TFMA updates Keras metrics in functions it traces).
"""

from __future__ import annotations

from tensorflow.python.autograph.core import config as _config

_RULES = {module: _config.DoNotConvert(module) for module in ("tf_keras", "tensorflow_transform")}
_RULE = _RULES["tf_keras"]  # the one benchmarks/trace_cost.py takes out to compare


def installed(module: str = "tf_keras") -> bool:
    """Whether `module` is left unconverted (a newer TensorFlow has the rule for tf_keras)."""
    return any(isinstance(rule, _config.DoNotConvert) and rule.matches(module)
               for rule in _config.CONVERSION_RULES)


def install() -> None:
    """Adds each rule unless it is there."""
    for module, rule in _RULES.items():
        if not installed(module):
            _config.CONVERSION_RULES = (rule,) + tuple(_config.CONVERSION_RULES)

