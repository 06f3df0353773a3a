"""The orchestrators lockstep runs its pipeline on: one module each, registered here by name.

An orchestrator is one object (the `Orchestrator` protocol below) in a module of its own:
  - `binding`: what the pipeline definition needs to know of it (pipeline/definition.py, Binding:
    are the run parameters runtime parameters; does it keep ML Metadata in the pipeline root);
  - `never_cached`: the nodes it must never take from its cache (their output depends on the
    world outside the pipeline, and its cache key does not see it);
  - `run(prepared, console)`: the whole pipeline here, returning the run's report (None when it
    only compiles: `lockstep submit` sends its spec to a cluster);
  - `compile(config, decisions, image)`: what it runs, where it has a form of its own (None when
    it runs the definition as it is);
  - `past_runs(config, limit)`: the reports of the runs it made under the pipeline root, for
    `lockstep runs` / `report` and a page's trend (None when it keeps them elsewhere).
Adding one is a module and a line in REGISTRY (or `register` from code: a test's toy target).
This package imports no TensorFlow, TFX or kfp: the CLI lists the names before any of them load,
and each module imports what it runs inside its methods.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from pipeline.local.console import Console
    from pipeline.reporting.run_report import RunReport

LOCAL, KUBEFLOW = "local", "kubeflow"

# name -> the module whose ORCHESTRATOR it is; the first is the default of `lockstep run`.
REGISTRY: dict[str, str] = {
    LOCAL: "pipeline.orchestrators.local_dag",
    "kfp-local": "pipeline.orchestrators.kfp_local_tasks",
    KUBEFLOW: "pipeline.orchestrators.kubeflow_cluster",
}

_registered: dict[str, "Orchestrator"] = {}


class Orchestrator(Protocol):
    name: str
    help: str  # one line: what it is, for `lockstep run --orchestrator`'s help
    binding: Any  # pipeline.definition.Binding (its module loads TFX)
    never_cached: tuple[str, ...]
    run: Callable[[Any, "Console"], "RunReport"] | None
    compile: Callable[..., Any] | None
    past_runs: Callable[[Any, int | None], list["RunReport"]] | None


class UnknownOrchestrator(LookupError):
    pass


def register(orchestrator: Orchestrator) -> Orchestrator:
    """Adds an orchestrator made in code (a test's, a plugin's) under its name."""
    _registered[orchestrator.name] = orchestrator
    return orchestrator


def get(name: str) -> Orchestrator:
    """The orchestrator of that name. Raises UnknownOrchestrator naming the known ones."""
    if name in _registered:
        return _registered[name]
    if name not in REGISTRY:
        raise UnknownOrchestrator(f"orchestrator must be one of {', '.join(names())}, "
                                  f"got {name!r}")
    return register(importlib.import_module(REGISTRY[name]).ORCHESTRATOR)


def names(runs_here: bool = False) -> list[str]:
    """The orchestrators' names (runs_here: those that run the pipeline on this machine)."""
    every = list(REGISTRY) + [name for name in _registered if name not in REGISTRY]
    return [name for name in every if not runs_here or get(name).run is not None]
