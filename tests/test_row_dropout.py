"""Dropout keyed on the row and the step (trainer_module/row_dropout.py): a row's mask does not
depend on the batch it comes in, its place in it or the replica that holds it; it changes with
the step and the layer; it drops `rate` of the units, whole blocks where asked; inference is the
identity; a layer trained with no step to key on says so. (That N replicas then make one device's
update with it is tests/test_equivalence.py's.)"""

import numpy as np
import pytest
import tensorflow as tf

from trainer_module import row_dropout

ROWS = 4000


def _rows(seed=0):
    rng = np.random.RandomState(seed)
    return [rng.randn(ROWS, 5).astype("float32"), rng.randint(0, 50, ROWS).astype("int64")]


def _mask(rows, step=3, salt=7, units=16, rate=0.25):
    key = row_dropout.row_key([tf.constant(c) for c in rows])
    return row_dropout.keep_mask(key, tf.constant(step, tf.int64), salt, units, rate).numpy()


def test_a_rows_mask_is_its_own_in_any_batch_and_order():
    rows = _rows()
    whole = _mask(rows)
    order = np.random.RandomState(1).permutation(ROWS)
    shuffled = _mask([c[order] for c in rows])
    np.testing.assert_array_equal(shuffled, whole[order])
    halves = np.concatenate([_mask([c[:ROWS // 2] for c in rows]),
                             _mask([c[ROWS // 2:] for c in rows])])  # two replicas' slices
    np.testing.assert_array_equal(halves, whole)
    # A row differing in one bit of one float, or in one id, is another row.
    nudged = [rows[0].copy(), rows[1].copy()]
    nudged[0][:, 2] = np.nextafter(nudged[0][:, 2], np.float32(np.inf))
    nudged[1] = nudged[1] + 1
    assert (_mask(nudged[:1] + rows[1:]) != whole).any(axis=1).mean() > 0.9
    assert (_mask(rows[:1] + nudged[1:]) != whole).any(axis=1).mean() > 0.9


def test_the_mask_drops_the_rate_and_changes_with_the_step_and_the_layer():
    rows = _rows()
    for rate in (0.1, 0.25, 0.5):
        kept = _mask(rows, rate=rate)
        assert kept.mean() == pytest.approx(1 - rate, abs=0.01)
        assert np.abs(kept.mean(axis=0) - (1 - rate)).max() < 0.04  # each unit alike
    base = _mask(rows)
    # Independent draws agree on a unit with probability 0.75^2 + 0.25^2 = 0.625.
    for other in (_mask(rows, step=4), _mask(rows, salt=8)):
        assert (other == base).mean() == pytest.approx(0.625, abs=0.01)


def test_a_layer_drops_whole_blocks_scales_the_rest_and_is_the_identity_in_inference():
    rows = _rows()
    key = row_dropout.row_key([tf.constant(c) for c in rows])
    layer = row_dropout.RowDropout(0.25, block=4, salt=3)
    x = tf.ones([ROWS, 6 * 4])
    with pytest.raises(row_dropout.UnattachedDropout, match="no step to draw its masks by"):
        layer([x, key], training=True)
    model = tf.keras.Sequential([layer])
    row_dropout.attach(model, tf.keras.optimizers.SGD())
    assert not layer.weights  # the optimizer's step is not the layer's weight
    out = layer([x, key], training=True).numpy().reshape(ROWS, 6, 4)
    assert set(np.unique(out)) == {0.0, np.float32(1 / 0.75)}
    assert (out == out[:, :, :1]).all()  # a block is kept or dropped whole
    assert (out[:, :, 0] == 0).mean() == pytest.approx(0.25, abs=0.01)
    np.testing.assert_array_equal(layer([x, key], training=False).numpy(), x.numpy())
