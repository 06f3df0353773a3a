"""A Keras model's parts, walked one way: the layers of one kind, in its nested models too (what
table_stack.stacks and target_statistics.layers find), and new Inputs like its inputs (what a model
made around it, model.unsharded and bag.averaged, takes)."""

from __future__ import annotations

import tensorflow as tf


def of_kind(model: tf.keras.Model, kind: type) -> list:
    """The model's layers that are `kind`, in order, its nested models' in their places (a walk
    of the layers: tf.Module's `submodules` walks every tracked object, 0.16 s on a 53-column
    model)."""
    found = []
    for layer in model.layers:
        if isinstance(layer, kind):
            found.append(layer)
        elif isinstance(layer, tf.keras.Model):
            found.extend(of_kind(layer, kind))
    return found


def inputs_like(model: tf.keras.Model) -> dict:
    """New Keras Inputs of the model's input names, shapes and dtypes (its input a dict)."""
    return {name: tf.keras.Input(shape=tensor.shape[1:], name=name, dtype=tensor.dtype)
            for name, tensor in model.input.items()}
