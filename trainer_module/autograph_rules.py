"""tf-keras and tf.Transform stay out of AutoGraph's conversion, as Keras always did.

AutoGraph converts every function a `tf.function` calls unless its module is on TensorFlow's
do-not-convert list. That list names `keras`, but TensorFlow 2.16 does not name `tf_keras`, the
legacy Keras this project runs (runtime/__init__.py): so each trace of a train step,
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

lockstep's own traced code is written to trace as it is, too: `plain` marks a function that has
no Python `if`, `for` or `while` on a tensor and calls no code of the user's (the built-in
model's layers, the gradients' sum over replicas, the input pipeline's functions). AutoGraph
rewrote each through its AST in every Trainer: on the bundled data, one core beside a running
test suite, 48 rewrites took 3.3 s of the Trainer; with these traced as written, 14 took 1.3 s.
The train loop, the validation score and the serving signatures are traced as written too
(tf.function with autograph=False: the loop's tf.while_loop and tf.where are written out), and
only the user's code in them is converted: the model is called `in_users_code` (where Keras
converts a user's layer's `call` itself) and a user's loss through `users`, so a user's tensor
`if` still traces. AutoGraph rewrote the loop's own seven functions
in every Trainer: on the bundled data, with a test suite running beside it, 1.3 s of the first
fit's trace, and the serving signatures and the validation score 0.6 s more.
"""

from __future__ import annotations

import tensorflow as tf

from trainer_module import tf_internals

MODULES = ("tf_keras", "tensorflow_transform")  # traced as written


def installed(module: str = "tf_keras") -> bool:
    """Whether `module` is left unconverted (a newer TensorFlow has the rule for tf_keras)."""
    return tf_internals.left_unconverted(module)


def install() -> None:
    """Adds each rule unless it is there (TensorFlow's rules: trainer_module/tf_internals.py)."""
    for module in MODULES:
        tf_internals.leave_unconverted(module)


def plain(function):
    """`function` traced as it is written, never rewritten by AutoGraph (the module's docstring):
    for lockstep's own code with no Python control flow on a tensor that calls no user code. A
    tensor `if` in it fails as it traces (a tf.Tensor used as a Python bool), it does not go wrong
    quietly. The result keeps `function`'s own signature for TensorFlow's inspection too (Keras
    reads a layer's `call` that way to decide whether to pass `training`)."""
    return tf_internals.make_decorator(function, tf.autograph.experimental.do_not_convert(function))


def users(function):
    """`function` (a user's loss) converted by AutoGraph when code traced as written calls it, so
    its tensor `if`s trace; lockstep's own, marked `plain`, is returned as it is."""
    return tf_internals.converted(function)


def in_users_code():
    """A context for calling a model (a user's, or the built-in one with its `plain` layers) in
    code traced as written: Keras converts a user's layer's `call` there, as in a converted trace."""
    return tf_internals.conversion_enabled()
