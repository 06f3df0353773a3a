"""Trains the built-in model asynchronously on a cluster on loopback of one worker and SERVERS
parameter servers, its table split over the servers, and the same model on one device with
Keras, on the same batches; prints what it found as JSON (tests/test_parameter_server.py; in a
process of its own, as a cluster needs).

usage: ps_tables.py SERVERS STEPS CHECKPOINT_DIR

One worker applies its updates one after another, as one device does: the weights after STEPS
AdamW steps are one device's (the largest difference is printed), the table split or not. The
checkpoint written there (the servers' parts) restores into the one-device model whole, and the
whole weights warm-start a fresh split model through the served model's weights file. With 3
servers, the job stopped halfway with the table split over 2 resumes from its checkpoint (the
weights, Adam's slots, early stopping's best weights) split over 3, and the other way round, and
each ends with one device's weights. (A table whole on one server is a block of the stacked small
tables, trainer_module/table_stack.py: a model of another layout, which its checkpoint does not
restore into.)
"""

import json
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

from trainer_module import build, early_stopping, export, model as model_lib, parameter_server
from trainer_module import sharded_embedding, table_decay
from trainer_module.settings import CLASSIFICATION, TrainerConfig

ROWS, BATCH, CLASSES = 37, 16, 3
NUMERIC, CATEGORICAL = ["x"], {"user": ROWS, "item": 5}


def _built(server_blocks=None):
    return model_lib.tabular(NUMERIC, CATEGORICAL, CLASSES, CLASSIFICATION, TrainerConfig(
        hidden_units=[8], embedding_dim=4, ensemble_members=2, seed=3),
        server_blocks=server_blocks)


def _dataset(_=None):
    rng = np.random.RandomState(0)
    # Ids drawn from few values: a batch repeats them, and most rows of the table are updated.
    user = rng.randint(0, ROWS, 512)
    x = {"x": rng.randn(512).astype("float32"), "user": user, "item": user % 5}
    y = ((user % 3 + (x["x"] > 0)) % CLASSES).astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()


def _values(model) -> dict:
    """{name: value} of the model's weights as one device's model of one Embedding per feature
    has them, however its tables are split or stacked."""
    return {name: sharded_embedding.weight_value(weight)
            for name, weight in sharded_embedding.named_weights(model)}


def _largest(a: dict, b: dict) -> float:
    return max(float(np.abs(a[name] - b[name]).max()) for name in a)


def _optimizer():
    """AdamW, the tables at a decay of their own (trainer_module/table_decay.py), as the run's."""
    return table_decay.AdamW(3.0, learning_rate=0.01, weight_decay=0.004)


def _resumed(strategy, loss, blocks: tuple[int, int], steps: int, directory: str, start: dict,
             ends: dict) -> dict:
    """Half the steps with the table in blocks[0] blocks, a checkpoint, and the rest with it in
    blocks[1] from that checkpoint: how far the end is from one device's (`ends`), the parts
    each leg had, and how far the best weights kept came back from what was kept."""
    def built(blocks):
        with strategy.scope():
            model = _built({"user": blocks})
            optimizer, best = _optimizer(), early_stopping.BestWeights(model)
        return model, optimizer, best

    def tracked(model, optimizer, best):
        return tf.train.Checkpoint(model=model, optimizer=optimizer, best=best)

    def parts(model):
        return [list(p.shape) for p in sharded_embedding.server_split(model)["embed_user"].variables]

    half = steps // 2
    first, first_optimizer, first_best = built(blocks[0])
    for name, weight in sharded_embedding.named_weights(first):
        weight.assign(start[name])
    parameter_server.AsynchronousLoop(strategy, first, first_optimizer, loss, BATCH, _dataset,
                                      steps_per_closure=4).train(half)
    first_best.keep(first, half, 0.5)
    path = tracked(first, first_optimizer, first_best).write(
        os.path.join(directory, f"half-{blocks[0]}", "ckpt"))
    second, second_optimizer, second_best = built(blocks[1])
    with strategy.scope():
        second_optimizer.build(second.trainable_variables)
    tracked(second, second_optimizer, second_best).read(path).assert_existing_objects_matched()
    rest = parameter_server.AsynchronousLoop(
        strategy, second, second_optimizer, loss, BATCH, lambda _=None: _dataset().skip(half),
        steps_per_closure=4)
    rest.train(steps - half)
    kept = [sharded_embedding.weight_value(w) for w in second_best.weights]
    wanted = [sharded_embedding.weight_value(w) for w in first_best.weights]
    return {"difference": _largest(_values(second), ends), "parts": [parts(first), parts(second)],
            "steps": int(second_optimizer.iterations.numpy()),
            "best_restored": max(float(np.abs(a - b).max()) for a, b in zip(kept, wanted))}


def main(servers: int, steps: int, directory: str) -> None:
    strategy = parameter_server.make_strategy(
        TrainerConfig(strategy="parameter_server", ps_workers=1, ps_servers=servers))
    loss = build.loss(TrainerConfig(), CLASSIFICATION, CLASSES)
    with strategy.scope():
        split = _built({"user": servers})
        optimizer = _optimizer()
    start = _values(split)
    trainer = parameter_server.AsynchronousLoop(strategy, split, optimizer, loss, BATCH, _dataset,
                                                steps_per_closure=4)
    trainer.train(steps)
    path = tf.train.Checkpoint(model=split).write(os.path.join(directory, "ckpt"))

    one = _built()  # its tables stacked: compared by name (sharded_embedding.named_weights)
    for name, weight in sharded_embedding.named_weights(one):
        weight.assign(start[name])
    one_optimizer = _optimizer()
    for x, y in _dataset().take(steps):
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(loss(y, one(x, training=True))) / BATCH
        one_optimizer.apply_gradients(zip(tape.gradient(value, one.trainable_variables),
                                          one.trainable_variables))
    trained, ends = _values(split), _values(one)
    restored = _built({"user": servers})  # outside the strategy: plain Embeddings, unsplit
    tf.train.Checkpoint(model=restored).read(path).expect_partial()
    # The served model's weights file, as export writes it, warm-starts a fresh split model.
    export.write_weights(one, os.path.join(directory, "served"))
    with strategy.scope():
        fresh = _built({"user": servers})
    matched = export.warm_start(fresh, os.path.join(directory, "served"))
    table = sharded_embedding.server_split(split)["embed_user"]
    print(json.dumps({
        "parts": [list(part.shape) for part in table.variables],
        "devices": sorted({part.device for part in table.variables}),
        "split_layers": sorted(sharded_embedding.server_split(split)),
        "names": sorted(ends) == sorted(trained) == sorted(start),
        "difference": _largest(trained, ends),
        "moved": _largest(trained, start),
        "restored": _largest(_values(restored), trained),
        "warm_matched": matched, "weights": len(ends),
        "warm": _largest(_values(fresh), ends),
        "updates": trainer.updates,
        "resumed": [_resumed(strategy, loss, blocks, steps, directory, start, ends)
                    for blocks in ([(2, 3), (3, 2)] if servers == 3 else [])]}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
