"""AdamW whose embedding tables decay at a rate of their own (trainer.table_weight_decay), every
other weight at trainer.weight_decay.

AdamW's decay is decoupled from the gradient and dense: at every step each row of a table shrinks
by (learning rate x decay) of itself, whether its value was in the batch or not, and the rows the
batch looked up then move by Adam's step. A row's size settles where the two balance, about
1 / decay a coordinate for a value in most batches, less for one seen rarely, which is pulled back
towards zero between its rows: a prior on what the model takes from each value of a text or code
column, which the dense layers do not get (3.0 on every weight cost AER's HMDA and ISLR's Wage
what it gave ISLR Caravan).

The default (-1) is weight_decay's, whatever it is set to: the run's model is Keras AdamW's, bit
for bit (tests/test_table_decay.py). At 3.0 Caravan (85 code columns of about ten values each, 3,700
rows) reaches CatBoost's default, and five tables of thirteen lose 0.0016 to 0.0085: no default
(docs/training.md, "AdamW").

The tables are the built-in model's (trainer_module/table_stack.py: the stacked tables, a table
alone, a table split over the replicas or over the parameter servers), told by their layers'
names (`is_table`). A table split over the replicas is updated by its own code
(trainer_module/sharded_embedding.py), which reads its rate here (`rate`), so it decays as the
whole table does on one device.
"""

from __future__ import annotations

import re

import tensorflow as tf

from trainer_module import table_stack

# A table's variable: under the stacked tables' layer, or under a table's own layer ("embed_x",
# alone, split over the replicas, or in parts on the parameter servers).
_TABLE = rf"(^|/)({re.escape(table_stack.NAME)}|{re.escape(table_stack.PREFIX)}[^/]*)/"


def is_table(name: str) -> bool:
    """Whether the variable of this name is an embedding table's."""
    return re.search(_TABLE, name) is not None


@tf.keras.utils.register_keras_serializable(package="lockstep")
class AdamW(tf.keras.optimizers.AdamW):
    """AdamW, its decoupled decay `weight_decay` on every weight but the tables', `table_decay`
    on theirs (applied, as AdamW applies its own, to the weights before the step's update)."""

    def __init__(self, table_decay: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.table_decay = float(table_decay)
        self.exclude_from_weight_decay(var_names=[_TABLE])

    def update_step(self, gradient, variable):
        if self.table_decay and is_table(variable.name):
            shrink(variable, self.table_decay, self.learning_rate)
        super().update_step(gradient, variable)

    def get_config(self):
        return {**super().get_config(), "table_decay": self.table_decay}


def shrink(variable, decay, learning_rate) -> None:
    """AdamW's decoupled decay of `variable` at one step, as Keras applies it to every weight:
    the whole table's here, a split table's block in its owner's update."""
    variable.assign_sub(variable * tf.cast(decay, variable.dtype)
                        * tf.cast(learning_rate, variable.dtype))


def configured(cfg) -> float:
    """The tables' decay a TrainerConfig asks for: trainer.table_weight_decay, or weight_decay's
    at -1 (so a config that sets weight_decay alone decays every weight at it, as AdamW does)."""
    return cfg.weight_decay if cfg.table_weight_decay == -1 else cfg.table_weight_decay


def rate(optimizer) -> float:
    """The decay of a table's rows under `optimizer` (Keras's own: its weight_decay, or none)."""
    if isinstance(optimizer, AdamW):
        return optimizer.table_decay
    return float(getattr(optimizer, "weight_decay", None) or 0.0)
