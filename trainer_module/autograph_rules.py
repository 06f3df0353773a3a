"""tf-keras stays out of AutoGraph's conversion, as Keras always did.

AutoGraph converts every function a `tf.function` calls unless its module is on TensorFlow's
do-not-convert list. That list names `keras`, but TensorFlow 2.16 does not name `tf_keras`, the
legacy Keras this project runs (trainer_module/__init__.py): so each trace of a train step,
an eval step or the serving signature rewrote Keras' own `Layer.__call__`, input checks and
optimizer internals through the AST, once per layer call. On a model with a hundred inputs
that was most of the Trainer's time, in tracing alone. Later TensorFlow releases add the same
rule. User code is still converted: Keras itself converts a subclassed layer's `call` when the
enclosing function runs under AutoGraph.

`install()` adds the rule (idempotent); the modules that trace Keras call it when imported
(loop.py, export.py).
"""

from __future__ import annotations

from tensorflow.python.autograph.core import config as _config

_RULE = _config.DoNotConvert("tf_keras")


def installed() -> bool:
    """Whether tf_keras is left unconverted (a newer TensorFlow has the rule itself)."""
    return any(isinstance(rule, _config.DoNotConvert) and rule.matches("tf_keras")
               for rule in _config.CONVERSION_RULES)


def install() -> None:
    """Adds the rule unless it is there."""
    if not installed():
        _config.CONVERSION_RULES = (_RULE,) + tuple(_config.CONVERSION_RULES)

