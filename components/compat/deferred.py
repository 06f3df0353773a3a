"""Packages of TFX's and its dependencies whose `__init__` runs only when something asks the
package for a name: `defer_package_init`.

Python runs a package's `__init__` before any module under it, and some import far more than the
modules lockstep uses. TFX's component catalogue, `tfx/components/__init__.py`, imports every
standard component so that `from tfx.components import Trainer` works: the Tuner brings
KerasTuner and with it Keras 3, the InfraValidator the Kubernetes and Docker clients. So
`from tfx.components.trainer import executor` paid for all of it: 1,600 modules, 0.4 CPU-s in a
`lockstep run`'s runner (its imports run with the collector off: runtime/processes.py) and
1.1 CPU-s in a process that imports with it on.

Deferred, the package sits in `sys.modules` unrun, its `__path__` set, so its modules import as
before; the first other name asked of it (`tfx.components.Trainer`, `from tfx.components import
Pusher`, the KFP v2 compiler's `components.FileBasedExampleGen`) runs the real `__init__` once,
in place, and answers from it. Nothing is lost: whatever asks gets what it would have got, later.

- `defer_component_catalogue`: every process that imports lockstep's `components` (and so
  `pipeline`: it imports `components` first), before anything under tfx.components is imported.
- A Kubeflow task defers four more (TFMA, TFDV, KFP, Beam: components/entrypoint.py,
  LAZY_PACKAGES), whose `__init__`s import far more than the protos and constants TFX's
  entrypoint and most executors take from them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

CATALOGUE = "tfx.components"
# Dunder names that run a deferred __init__ (the rest, probed by pickle, inspect or copy, do not).
RUN_FOR = ("__all__", "__version__")
_PENDING: dict[str, object] = {}  # package -> the hook that runs its deferred __init__


def defer_component_catalogue() -> None:
    """`tfx.components` importable without its `__init__`, which runs at the first name asked of
    the package (see the module docstring)."""
    defer_package_init(CATALOGUE)


def catalogue_ran() -> bool:
    """Whether tfx.components' `__init__` has run in this process (it has if something imported
    the package before lockstep could defer it, or asked it for a name since)."""
    return package_init_ran(CATALOGUE)


def defer_package_init(name: str) -> None:
    """The package `name` in `sys.modules` with its `__init__` not run. Its submodules import as
    usual, and `from name import submodule` (or `name.submodule`) imports just that one. Any other
    name asked of the package runs the `__init__` in place (one thread runs it, the others wait
    for it), so every holder of the package sees it whole, and answers from it; so does
    `__all__` (a star import) or `__version__`, while the other dunder names Python's machinery
    probes (pickle, inspect, copy) find nothing and run nothing. Nothing happens where the
    package is imported already or is not a package. A failing `__init__` raises as its import
    would have and leaves the package out of `sys.modules`, as a failed import does."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    package = importlib.util.module_from_spec(spec)
    lock = threading.Lock()
    running = []  # the thread running the __init__, while it runs

    def run_init(attribute: str):
        if (attribute.startswith("__") and attribute not in RUN_FOR) \
                or running == [threading.get_ident()]:  # or the __init__ asks: not there yet
            raise AttributeError(f"module {name!r} has no attribute {attribute!r} (yet)")
        if importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        with lock:
            if _PENDING.get(name) is run_init:
                running.append(threading.get_ident())
                try:
                    spec.loader.exec_module(package)
                except BaseException:
                    sys.modules.pop(name, None)
                    raise
                finally:
                    running.clear()
                    _PENDING.pop(name, None)
                if package.__dict__.get("__getattr__") is run_init:  # not one the __init__ made
                    del package.__dict__["__getattr__"]
        try:
            return package.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    _PENDING[name] = run_init
    package.__getattr__ = run_init  # PEP 562: asked only for names the module does not have
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(importlib.import_module(parent), child, package)


def package_init_ran(name: str) -> bool:
    """Whether the package's `__init__` has run (False: not imported, or deferred and not asked)."""
    return name in sys.modules and name not in _PENDING
