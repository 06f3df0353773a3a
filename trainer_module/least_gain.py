"""The least gain that counts: when a validation score is a new best (early stopping,
trainer_module/early_stopping.py), and when the kept weights' score is so near zero that none
could be (`unbeatable`): training then stops at once, and no refit follows
(trainer_module/refit.py). No TensorFlow: the summary and the refit's plan read it."""

from __future__ import annotations

import math

# A score is a new best when it is lower by more than this share of the best (or MIN_DELTA, near
# zero): a model that already separates the rows (a loss of 1e-4) does not train on for gains
# of a millionth.
RELATIVE_DELTA, MIN_DELTA = 1e-3, 1e-4


def better(loss: float, best: float) -> bool:
    """Whether `loss` is a new best against `best` (inf before the first score)."""
    if not math.isfinite(loss):
        return False
    return not math.isfinite(best) or loss < best - max(RELATIVE_DELTA * best, MIN_DELTA)


def unbeatable(best: float) -> bool:
    """Whether no score could beat `best` by the least gain that counts (not even a loss of 0)."""
    return math.isfinite(best) and not better(0.0, best)
