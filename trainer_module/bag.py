"""A bag of refits: on a small table, the built-in model's refit after early stopping
(trainer_module/refit.py) is made `trainer.bags` times, each from its own seed (its own initial
weights and order of the rows), and the model evaluated and exported is their mean: the mean of
their probabilities (as log-probabilities, a softmax of which gives it) or of their values. On a
table of a few thousand rows one seed moves the held-out AUC by 0.005 to 0.018; the mean of fits
from several seeds takes out much of what a seed adds (bagging; deep ensembles: Lakshminarayanan
et al. 2017). The first fit and its refit start from the same initial weights, and their mean did
not pay (ISLR Caravan 0.7667 and 0.7687 with the refit alone, 0.7654 and 0.7680 with the first
fit beside it; two seeds' refits: 0.7724): the members' seeds are what differ.

Each member is a refit job of its own (its seed, its directory under the first fit's ModelRun
directory: trainer_module/refit.py's `members`), trained by the same loop, so N replicas make one
device's update for each, and a SIGTERM in any member resumes as a refit does
(trainer_module/train.py parks the members before it). Where: a train split of
trainer.bag_min_rows (1,000) to bag_rows (5,000) rows. Past bag_rows, a table's seeds moved its
figure less than the bar a comparison asks about (COUNT's rwm5yr, 12,559 rows: +0.0008) and each
member costs a refit's steps; below bag_min_rows, a second refit's fixed costs (its trace, its
statistics' pass) are most of the Trainer (the bundled penguins' 285 rows: 9.0 -> 12.1 s) and an
eval split of a few dozen rows shows no gain (docs/training.md, "A bag of refits"). A model of
the user's own (trainer.model) is refit once: served as their code builds it."""

from __future__ import annotations

import tensorflow as tf

from trainer_module import layer_walk
from trainer_module.ensemble_head import ensemble_mean


def averaged(models: list[tf.keras.Model], task: str) -> tf.keras.Model:
    """One model whose output is the mean of the `models`' in inference (model.ensemble_mean
    over them, in float32); a bag of one: the model itself. The members keep their weights (not
    copied) and are named member_0, member_1, ... in it."""
    if len(models) == 1:
        return models[0]
    inputs = layer_walk.inputs_like(models[0])
    # Each fit's model is named as in a fresh process ("model"): the same layers under a name
    # of their own.
    named = [tf.keras.Model(member.inputs, member.outputs, name=f"member_{index}")
             for index, member in enumerate(models)]
    return tf.keras.Model(inputs, MeanOfMembers(task)([member(inputs) for member in named]),
                          name="bag")


@tf.keras.utils.register_keras_serializable(package="lockstep")
class MeanOfMembers(tf.keras.layers.Layer):
    """[the members' outputs, each [batch, outputs]] -> [batch, outputs]: their mean
    (model.ensemble_mean, float32). Inference only: a bag is exported, never trained."""

    def __init__(self, task: str, **kwargs):
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        self.task = task

    def call(self, outputs):
        return ensemble_mean(tf.stack([tf.cast(o, tf.float32) for o in outputs], axis=1),
                             self.task)

    def get_config(self):
        return {**super().get_config(), "task": self.task}
