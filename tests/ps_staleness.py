"""Trains a small model asynchronously on a cluster on loopback and prints the AsynchronousLoop's
counts as JSON (tests/test_parameter_server.py; in a process of its own, as a cluster needs).

usage: ps_staleness.py WORKERS SLEEP_SECONDS STEPS
SLEEP_SECONDS: each step sleeps that long between reading the weights and updating them (inside
the loss), so that the steps of different workers overlap by a known amount.
"""

import json
import os
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

from trainer_module import parameter_server


def main(workers: int, sleep: float, steps: int) -> None:
    strategy = tf.distribute.ParameterServerStrategy(parameter_server.local_cluster(workers, 1))
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)),
                                     tf.keras.layers.Dense(2)])
        optimizer = tf.keras.optimizers.SGD(0.01)

    def pause():
        time.sleep(sleep)
        return np.float32(0)

    def loss(labels, logits):
        if sleep:
            logits += tf.stop_gradient(tf.numpy_function(pause, [], tf.float32, stateful=True))
        return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)

    def dataset_fn(_):
        x = np.random.RandomState(0).randn(256, 4).astype("float32")
        return tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("int64"))).repeat().batch(
            16, drop_remainder=True)

    trainer = parameter_server.AsynchronousLoop(strategy, model, optimizer, loss, 16, dataset_fn,
                                            steps_per_closure=5)
    trainer.train(steps // 2)
    logs = trainer.train(steps - steps // 2)
    print(json.dumps({**logs, "updates": trainer.updates,
                      "iterations": int(optimizer.iterations.numpy())}))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]))
