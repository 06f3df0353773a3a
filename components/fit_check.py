"""Whether a booster's fit is a reference (components/gradient_boosting.py): one whose train loss
rose as trees were added (it diverged: on openintro's loans LightGBM's train log-loss fell to 0.07
by tree 22 and rose to 23.5 by tree 100), or that ends no lower than the naive baseline on its
own train rows, is not one; the figures of why go into the run's `not measured` line."""

from __future__ import annotations

import numpy as np

# A train loss within this share of the naive baseline's is no better than it (a fit that made no
# split predicts the train mean, whose l2 LightGBM and numpy round apart).
NAIVE_TOLERANCE = 1e-6
# A train loss that ends above this many times its lowest (and RISE_MIN above it) is a fit that
# diverged: boosting's train loss falls tree by tree where the fit is sound.
RISE_RATIO, RISE_MIN = 2.0, 0.01


def failed(losses: np.ndarray, y: np.ndarray, regression: bool) -> str:
    """Why the fit is no reference ("" where it is sound): its train loss rose (the fit
    diverged), or ended no lower than the naive baseline's on the same rows (the label's mean,
    or its classes' train shares)."""
    name = "l2" if regression else "log-loss"
    last, lowest = float(losses[-1]), float(losses.min())
    if not np.isfinite(last):
        return f"diverged: its train {name} became {last}"
    if last > RISE_RATIO * lowest and last - lowest > RISE_MIN:
        return (f"diverged: its train {name} fell to {lowest:.4g} at tree "
                f"{int(losses.argmin()) + 1}, then rose to {last:.4g} at tree {len(losses)}")
    if regression:
        naive = float(np.mean((y - y.mean()) ** 2))
    else:
        shares = np.bincount(y.astype(np.int64)) / len(y)
        naive = float(-np.sum(shares[shares > 0] * np.log(shares[shares > 0])))
    if last >= naive * (1 - NAIVE_TOLERANCE):
        return (f"is no better than the naive baseline on its train rows: train {name} "
                f"{last:.4g}, the naive {naive:.4g}")
    return ""
