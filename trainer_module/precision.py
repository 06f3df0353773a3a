"""Mixed precision: the layers compute in 16 bits, the variables, the loss and the outputs stay
float32 (trainer.precision; tf-keras' mixed precision policies).

- mixed_bfloat16: what TPUs compute natively (bfloat16 has float32's exponent range, so no loss
  scaling); it runs on CPUs too, slower than float32 where the CPU has no bfloat16 units.
- mixed_float16: GPUs. float16's range is narrow, so the loss is multiplied by a dynamic scale
  before the gradients are taken and the gradients divided by it after, once per step
  (tf-keras' LossScaleOptimizer); a step whose gradients overflow is skipped and the scale
  halved. The loop counts the skipped steps (trainer_module/loop.py). TPUStrategy refuses it.

Keras reads the global policy when a layer is made, so `policy(precision)` sets it only while the
model is built and puts the previous one back: nothing else in the process (the Evaluator in the
same process, the next test) computes in 16 bits by accident.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import tensorflow as tf

from trainer_module.settings import FLOAT32, MIXED_FLOAT16


@contextlib.contextmanager
def policy(precision: str) -> Iterator[None]:
    """The Keras global policy `precision` while the block runs (build the model in it)."""
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy(precision)
    try:
        yield
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)


def float32_outputs(model: tf.keras.Model) -> tf.keras.Model:
    """The model, with its outputs cast to float32 if its last layer computes in 16 bits (the loss
    and the served signature take float32; a softmax or loss in float16 loses precision)."""
    if model.outputs is None or all(out.dtype == tf.float32 for out in model.outputs):
        return model
    cast = tf.keras.layers.Activation("linear", dtype=FLOAT32, name="float32_outputs")
    return tf.keras.Model(model.input, cast(model.outputs[0]), name=model.name)


def wrap_optimizer(optimizer: tf.keras.optimizers.Optimizer,
                   precision: str) -> tf.keras.optimizers.Optimizer:
    """mixed_float16: the optimizer in a dynamic LossScaleOptimizer; otherwise as it is."""
    if precision == MIXED_FLOAT16:
        return tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer


def loss_scaled(optimizer) -> bool:
    return isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
