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
