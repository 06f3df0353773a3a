"""dill, Beam's pickler: one private name rebound while lockstep's Beam executors run.

Beam's pickler (apache_beam.internal.dill_pickler) calls dill's private `_trace(False)` after
every pickle and unpickle of a DoFn, a transform or a coder: about 6,400 times in a `lockstep
run` on the bundled data. `_trace` sets the level of dill's logger, and Logger.setLevel clears
the level cache of every logger there is (about 1,000 once TensorFlow, TFX and Beam are
imported): 0.11 ms a call, 0.7 s of a run on one core, each time to set the level the logger
already has. `quiet_trace` sets it only where it differs: the same level either way.
compat/beam.py's `spare_fixed_costs` applies it with Beam's own."""

from __future__ import annotations

import contextlib
import logging

from dill import _dill

from components.compat.swapped import swapped
from components.compat.symbols import Symbol

SYMBOLS = (Symbol(_dill.__name__, "_trace"), Symbol(_dill.__name__, "log"))


def _trace(boolean: bool) -> None:
    """dill's _trace (INFO when tracing, else WARN), without a call to setLevel that changes
    nothing."""
    level = logging.INFO if boolean else logging.WARN
    if _dill.log.level != level:
        _dill.log.setLevel(level)


@contextlib.contextmanager
def quiet_trace():
    """Inside the block, dill's `_trace` sets its logger's level only where it differs."""
    with swapped(_dill, "_trace", _trace):
        yield
