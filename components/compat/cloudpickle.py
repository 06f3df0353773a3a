"""cloudpickle, the pickler Beam's in-process pipelines use (compat/beam.py, `cloudpickled`): one
private name rebound while they pickle.

Pickling a function by value (a lambda, a closure: about 1,800 in a `lockstep run` on the
bundled data), cloudpickle finds which submodules of the packages the function refers to are
imported, so that unpickling imports them too (`_find_imported_submodules`). For each package
among the function's globals it walks all of `sys.modules`, some 8,000 names once TensorFlow,
TFX and Beam are imported: 2.8 million string comparisons a run, about 0.5 s on one core.
`submodules_indexed` answers from an index of the loaded modules by package, made again whenever
the number of loaded modules changes: the same modules, in the same order (sys.modules' own)."""

from __future__ import annotations

import contextlib
import sys
import types

from cloudpickle import cloudpickle_fast as _pickler

from components.compat.swapped import swapped
from components.compat.symbols import Symbol

# cloudpickle 2.x defines it in cloudpickle.cloudpickle; its pickler (cloudpickle_fast) imports it
# by name and calls it from there.
_MODULE = _pickler.__name__
SYMBOLS = (Symbol(_MODULE, "_find_imported_submodules", read_by=_MODULE),)

# (how many modules were loaded, {package: [the names of its loaded submodules, in sys.modules'
# order]}) as of the last index made
_index: tuple[int, dict[str, list[str]]] = (-1, {})


def _submodules() -> dict[str, list[str]]:
    """{package name: its loaded submodules' names}, made again when sys.modules' size changed
    (asked first: a copy of its ~6,000 names took 90 us, at each of ~1,000 pickles in a run's
    runner process)."""
    global _index
    if _index[0] != len(sys.modules):
        names = list(sys.modules)  # a copy: another thread may import meanwhile
        index: dict[str, list[str]] = {}
        for name in names:
            if not isinstance(name, str):  # older pytest put a None there
                continue
            parts = name.split(".")
            for end in range(1, len(parts)):
                index.setdefault(".".join(parts[:end]), []).append(name)
        _index = (len(names), index)
    return _index[1]


def _find_imported_submodules(code, top_level_dependencies) -> list:
    """cloudpickle's `_find_imported_submodules`, from the index: the loaded submodules of each
    package among `top_level_dependencies` that the code can reach by attribute names."""
    subimports, index, reachable = [], _submodules(), set(code.co_names)
    for x in top_level_dependencies:
        if isinstance(x, types.ModuleType) and getattr(x, "__package__", None):
            prefix = x.__name__ + "."
            for name in index.get(x.__name__, ()):
                if not set(name[len(prefix):].split(".")) - reachable:
                    module = sys.modules.get(name)
                    if module is not None:
                        subimports.append(module)
    return subimports


@contextlib.contextmanager
def submodules_indexed():
    """Inside the block cloudpickle finds a function's imported submodules from the index."""
    with swapped(_pickler, "_find_imported_submodules", _find_imported_submodules):
        yield


def stock_submodules(code, top_level_dependencies) -> list:
    """cloudpickle's own answer (for tests comparing the two)."""
    return _STOCK(code, top_level_dependencies)


_STOCK = _pickler._find_imported_submodules
