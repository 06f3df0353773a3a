"""Apache Beam: one name rebound while lockstep's Beam executors run, to spare a fixed cost
(`spare_fixed_costs`, with dill's in compat/dill.py).

Beam asks for a DoFn's state and timer parameters (`userstate.get_dofn_specs`) each time it
builds, translates, validates or starts a bundle of a DoFn step: about 3,700 times in a
`lockstep run` on the bundled data (344 rows). Each time it reads the signature of every method
of the DoFn, through `core.get_function_args_defaults` and `inspect.signature`: 108,000
signatures, 2.8 s of a 22 s run on one core, for what is the same answer each time. In the same
process a function's parameters and their defaults do not change unless its code, defaults or
wrapper are replaced, so `signatures_remembered` has that function remember its answer per
function (a method's per the function it binds) for as long as the function lives, and works
it out again where any of those changed. Callables that are not Python functions (builtins,
partials, classes, objects with __call__) are asked every time, as before.
LOCKSTEP_STOCK_BEAM=1 in the environment leaves Beam's and dill's functions as they are (for a
side-by-side measure, benchmarks/beam_fixed_costs.py, or to rule this out).

Beam is not among the dependencies tools/private_names.py lints (its heuristics match too many
of lockstep's own names against a package this large); the rebinding lives here all the same,
declared in SYMBOLS, so that tests/test_compat.py names it when an upgrade moves it."""

from __future__ import annotations

import contextlib
import functools
import os
import types
import weakref

from apache_beam.transforms import core

from components.compat import dill as dill_compat
from components.compat.swapped import swapped
from components.compat.symbols import Symbol

_CORE = core.__name__
SYMBOLS = (Symbol(_CORE, "get_function_args_defaults", read_by=_CORE),)

STOCK_SWITCH = "LOCKSTEP_STOCK_BEAM"
_STOCK = core.get_function_args_defaults
# function -> (what the answer depends on, the answer); one table for the function itself, one
# for a method bound to it (its first parameter, the instance, left out).
_OF_FUNCTION: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_OF_METHOD: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _depends_on(function: types.FunctionType) -> tuple:
    """What inspect.signature reads of a Python function, each compared by identity."""
    return (function.__code__, function.__defaults__, function.__kwdefaults__,
            getattr(function, "__wrapped__", None), getattr(function, "__signature__", None))


def _remembered(f):
    """core.get_function_args_defaults(f), remembered per Python function."""
    if isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
        table, function = _OF_METHOD, f.__func__
    elif isinstance(f, types.FunctionType):
        table, function = _OF_FUNCTION, f
    else:
        return _STOCK(f)
    state = _depends_on(function)
    known = table.get(function)
    if known is None or any(a is not b for a, b in zip(known[0], state)):
        known = table[function] = (state, _STOCK(f))
    args, defaults = known[1]
    return list(args), list(defaults)  # the callers' own lists, as Beam gives them


@contextlib.contextmanager
def signatures_remembered():
    """Inside the block, Beam's `core.get_function_args_defaults` remembers its answers."""
    with swapped(core, "get_function_args_defaults", _remembered):
        yield


def spare_fixed_costs(do):
    """An executor's Do, run with Beam's signatures remembered (`signatures_remembered`) and
    dill's trace quiet (compat/dill.py), neither with LOCKSTEP_STOCK_BEAM=1."""
    @functools.wraps(do)
    def wrapper(*args, **kwargs):
        if os.environ.get(STOCK_SWITCH) == "1":
            return do(*args, **kwargs)
        with signatures_remembered(), dill_compat.quiet_trace():
            return do(*args, **kwargs)
    return wrapper


def stock_signature(f) -> tuple[list, list]:
    """Beam's own answer, never remembered (for tests comparing the two)."""
    return _STOCK(f)
