"""TFX's component catalogue, `tfx/components/__init__.py`, run only when something asks it for a
name.

That file imports every standard component so that `from tfx.components import Trainer` works:
the Tuner brings KerasTuner and with it Keras 3, the InfraValidator the Kubernetes and Docker
clients, the BulkInferrer and the rest their executors. Python runs a package's `__init__` before
any module under it, so lockstep's `from tfx.components.trainer import executor` paid for all of
it: 1,600 modules, about 0.6 to 1 CPU-second in every process that imports the pipeline's
definition or a component (a `lockstep run`, its worker lane, each Kubeflow task).

`defer_component_catalogue` puts the package in `sys.modules` unrun, its `__path__` set, so its
modules import as before; the first attribute asked of the package itself (`tfx.components.
Trainer`, `from tfx.components import Pusher`, the KFP v2 compiler's `components.
FileBasedExampleGen`) runs the real `__init__` once, in place, and answers from it. Nothing is
lost: whatever asks gets what it would have got, later. Called where lockstep's packages start
(`components/__init__.py`; `pipeline` imports it first), before anything under tfx.components is
imported; where the package is already imported it does nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

CATALOGUE = "tfx.components"


def defer_component_catalogue() -> None:
    """`tfx.components` importable without its `__init__`, which runs at the first name asked of
    the package (see the module docstring)."""
    defer_package_init(CATALOGUE)


def catalogue_ran() -> bool:
    """Whether tfx.components' `__init__` has run in this process (it has if something imported
    the package before lockstep could defer it, or asked it for a name since)."""
    return package_init_ran(CATALOGUE)


def defer_package_init(name: str) -> None:
    """The package `name` in `sys.modules` with its `__init__` not run: its modules import as
    usual, and the first attribute asked of the package itself runs the `__init__` in place (one
    thread runs it, the others wait) and answers from it. Nothing happens where the package is
    imported already or is not a package. A failing `__init__` raises as its import would have
    and leaves the package out of `sys.modules`, as a failed import does."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    package = importlib.util.module_from_spec(spec)
    lock = threading.Lock()
    running = []  # the thread running the __init__, while it runs

    def run_init(attribute: str):
        if running == [threading.get_ident()]:  # the __init__ itself asks: not there yet
            raise AttributeError(f"partially initialised module {name!r} has no attribute "
                                 f"{attribute!r}")
        with lock:  # the first thread runs it; the others wait for it here
            if "__getattr__" in package.__dict__:
                running.append(threading.get_ident())
                try:
                    spec.loader.exec_module(package)
                except BaseException:
                    sys.modules.pop(name, None)
                    raise
                finally:
                    running.clear()
                del package.__dict__["__getattr__"]
        try:
            return package.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    package.__getattr__ = run_init  # PEP 562: asked only for names the module does not have
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(importlib.import_module(parent), child, package)


def package_init_ran(name: str) -> bool:
    """Whether the package's `__init__` has run (False: not imported, or deferred and not asked)."""
    package = sys.modules.get(name)
    return package is not None and "__getattr__" not in package.__dict__
