"""The input pipeline's parse (trainer_module/input_pipeline.py) on real TFRecords: a row without
a label (class -1, a NaN regression label) is dropped with every one of its features, the
others kept in order, each feature beside its own label."""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import input_pipeline, settings


def _write(path, labels, dtype):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for i, label in enumerate(labels):
            example = tf.train.Example()
            example.features.feature["a_xf"].float_list.value.append(float(i))
            example.features.feature["k_xf"].int64_list.value.append(10 * i)
            example.features.feature["v_xf"].float_list.value.extend([i, -i])
            if dtype == tf.int64:
                example.features.feature["y_xf"].int64_list.value.append(int(label))
            else:
                example.features.feature["y_xf"].float_list.value.append(float(label))
            writer.write(example.SerializeToString())


@pytest.mark.parametrize("task, labels", [
    (settings.CLASSIFICATION, [0, -1, 2, 1, -1, -1, 0, 1, 2, -1]),
    (settings.REGRESSION, [0.5, np.nan, 2.0, -1.0, np.nan, np.inf, 0.0, 1.0, 3.5, np.nan]),
])
def test_rows_without_a_label_are_dropped_whole_and_the_rest_kept_in_order(tmp_path, task,
                                                                            labels):
    dtype = tf.int64 if task == settings.CLASSIFICATION else tf.float32
    _write(tmp_path / "part.gz", labels, dtype)
    spec = {"a_xf": tf.io.FixedLenFeature([], tf.float32),
            "k_xf": tf.io.FixedLenFeature([], tf.int64),
            "v_xf": tf.io.FixedLenFeature([2], tf.float32),
            "y_xf": tf.io.FixedLenFeature([], dtype)}
    dataset = input_pipeline.make_dataset_fn(str(tmp_path / "*.gz"), spec, "y", task, 4,
                                             training=False)(None)
    batches = list(dataset)
    x = {k: np.concatenate([b[0][k].numpy() for b in batches]) for k in spec if k != "y_xf"}
    y = np.concatenate([b[1].numpy() for b in batches])
    labeled = [i for i, label in enumerate(labels)
               if (label >= 0 if task == settings.CLASSIFICATION else np.isfinite(label))]
    assert x["a_xf"].tolist() == labeled
    assert x["k_xf"].tolist() == [10 * i for i in labeled]
    assert x["v_xf"].tolist() == [[i, -i] for i in labeled]
    assert y.tolist() == [labels[i] for i in labeled]


def test_the_statistics_pass_parses_the_rows_training_reads_and_training_reads_them_as_before(
        tmp_path):
    """`once` (what build.fill_statistics reads): every fit row once, parsed into the training
    input's in-memory cache. Training then parses nothing more, and reads the very batches, in
    the same order, that an input never read by `once` gives, over several epochs. Where the
    training input is not kept so (another pipeline count, a clock seed, streamed, not
    training), there is nothing to share."""
    for i in range(3):
        _write(tmp_path / f"part-{i}.gz", [(7 * i + j) % 3 for j in range(300)], tf.int64)
    spec = {"a_xf": tf.io.FixedLenFeature([], tf.float32),
            "k_xf": tf.io.FixedLenFeature([], tf.int64),
            "v_xf": tf.io.FixedLenFeature([2], tf.float32),
            "y_xf": tf.io.FixedLenFeature([], tf.int64)}
    parses = tf.Variable(0, dtype=tf.int64)

    def counted(parsed):
        parses.assign_add(1)
        return parsed

    def make(transform=None, **kwargs):
        arguments = {"training": True, "seed": 3, "cache": True, "chunk_steps": 2,
                     "transform": transform, "part": input_pipeline.FIT,
                     "validation_share": 0.2, **kwargs}
        return input_pipeline.make_dataset_fn(str(tmp_path / "*.gz"), spec, "y",
                                              settings.CLASSIFICATION, 8, **arguments)

    fit = list(make(training=False)(None))
    fit_rows = sorted(np.concatenate([x["a_xf"].numpy() for x, _ in fit]).tolist())
    assert 600 < len(fit_rows) < 840  # 20 % of 900 held out, by hash

    dataset_fn = make(counted)
    once = list(dataset_fn.once(2))
    assert sorted(np.concatenate([x["a_xf"].numpy() for x, _ in once]).tolist()) == fit_rows
    assert parses.numpy() == len(once) == -(-len(fit_rows) // 32)  # chunks of 2 steps of 2 x 8

    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    steps = 3 * len(fit_rows) // 8
    trained = list(dataset_fn(context).take(steps))
    assert parses.numpy() == len(once), "training parsed the rows again"
    expected = list(make()(context).take(steps))
    assert len(trained) == len(expected) == steps
    for (x, y), (x_expected, y_expected) in zip(trained, expected):
        assert np.array_equal(y.numpy(), y_expected.numpy())
        for key in x:
            assert np.array_equal(x[key].numpy(), x_expected[key].numpy()), key

    assert dataset_fn.once(2, pipelines=2) is None
    assert make(seed=None).once(2) is None
    assert make(training=False).once(2) is None
    assert make(cache=False).once(2) is None
