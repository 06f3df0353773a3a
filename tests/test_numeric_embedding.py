"""The numeric embedding's z-score channel (trainer_module/model.py, NumericEmbedding): softly
clipped at model.CLIP = 10, so a column keeps its order well past three standard deviations
(ISLR Wage's label is exp(logwage): at 3 its top values were nearly flat) and stays bounded."""

import numpy as np

from trainer_module import features, model as model_lib


def _z_channel(z: np.ndarray) -> np.ndarray:
    """The layer's output with a kernel that reads only the z-score channel, bias 0."""
    layer = model_lib.NumericEmbedding(features.QUANTILE_BINS, 1)
    x = np.stack([np.zeros_like(z), z, np.zeros_like(z)], axis=-1)[:, None, :].astype("float32")
    layer(x)
    kernel = np.zeros(layer.kernel.shape, "float32")
    kernel[0, features.QUANTILE_BINS, 0] = 1.0  # the channel after the bins' shares
    layer.kernel.assign(kernel)
    layer.bias.assign(np.zeros(layer.bias.shape, "float32"))
    return layer(x).numpy()[:, 0]


def test_the_z_score_keeps_its_order_past_three_deviations_and_stays_bounded():
    got = _z_channel(np.array([1.0, 3.0, 6.0, 9.0, 30.0, 1e6]))
    assert model_lib.CLIP == 10.0
    np.testing.assert_allclose(got[:4], [z / np.sqrt(1 + (z / 10) ** 2) for z in (1, 3, 6, 9)],
                               rtol=1e-6)
    assert got[2] > 5.0 and got[3] - got[2] > 1.5  # at a clip of 3: 2.68 and 0.17 apart
    assert np.all(np.diff(got) > 0) and got[-1] <= 10.0 + 1e-4  # increasing, bounded by CLIP
