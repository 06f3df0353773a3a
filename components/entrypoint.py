"""The command every compiled Kubeflow task runs: TFX's KFP v2 executor entrypoint, started lean.

TFX's entrypoint (`tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor`) reads the
task's executor input and runs the component's executor. Started as it is, every task spent 10 to
12 s importing before its executor did anything, much of it for code the task never runs:
importing any `tfx.components.<name>.executor` runs `tfx/components/__init__.py`, which imports
every TFX component and executor (TFMA, BigQuery, the bulk inferrer, ...); TFX's component specs
import TFDV's and TFMA's whole packages for a few protos; and the entrypoint imports the
Evaluator's executor and Beam only to ask whether the task's executor is one of theirs. So:

- the packages in LAZY_PACKAGES run their __init__ only when a name defined there is used
  (components/compat/deferred.py): their submodules import as usual, and a task that uses more
  gets all of it;
- the task's executor class is imported first; a base class TFX's entrypoint asks about
  (ASKED_BASES) whose module that did not import cannot be among the class's bases (a subclass
  imports its base), so a placeholder module answers the entrypoint's issubclass check;
- then TFX's entrypoint runs, unchanged, with the same arguments.

TensorFlow itself stays (TFX's artifact types and file I/O import it): about 5.5 s of every
task's start on a 2-core machine.

One line on stdout marks the moment the executor's `Do` begins (START_MARKER and the Unix time),
so a runner can split a task's time into start-up and work (pipeline/local/kfp_local.py does).
Nothing here changes what an executor computes.

Before any of that, the places the task will write are probed (components/fs.py, `probe`): each
output artifact's URI and, for the Pusher, its serving dir. One that cannot take a file ends the
task at once with one line naming it and UNWRITABLE_STATUS, not after its work is done.

The same command runs the Trainer inside a Vertex AI job (components/vertex_training.py), with
tfx.scripts.run_executor's arguments (`--inputs-base64` ...) instead of a KFP executor input:
RUN_EXECUTOR_FLAG tells them apart.

A Trainer task stopped by SIGTERM while it trains (its pod evicted, its node preempted) saves a
checkpoint first (runtime/termination.py) and exits with PREEMPTED_STATUS and one line;
KFP's retry runs the same executor input, so the same ModelRun directory, and resumes there. Any
task stopped by SIGTERM at another instant (its imports, its executor, the publishing of its
outputs) exits with the same status and one line naming its executor, within seconds, rather than
being killed mid-write at the end of the grace period.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from typing import Callable

from components.compat import deferred, tfx as tfx_compat

START_MARKER = "lockstep-task: executor Do begins at"
# What the compiled spec runs in every task (pipeline/kubeflow/compiler.py), and the image's ENTRYPOINT.
COMMAND = ("python", "-m", "components.entrypoint")
# The base classes TFX's entrypoint asks a task's executor class about (issubclass), by module.
# Importing a subclass imports its base's module; a module not imported by then gets a
# placeholder whose class nothing derives from, and costs nothing (Beam: 2 s, TFMA: 2 s).
ASKED_BASES = {"tfx.components.evaluator.executor": "Executor",
               "tfx.dsl.components.base.base_beam_executor": "BaseBeamExecutor"}
# Packages whose __init__ imports far more than the protos and constants that TFX's entrypoint
# and most executors take from them; a task that uses more loads the rest then
# (components/compat/deferred.py; tfx.components is deferred already, as `components` is imported).
LAZY_PACKAGES = ("tensorflow_model_analysis", "tensorflow_data_validation", "kfp", "apache_beam")


def _executor_class_path(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--executor_class_path" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--executor_class_path="):
            return arg.split("=", 1)[1]
    return None


def _mark_start() -> None:
    """Prints START_MARKER with the time (when the executor's Do is called)."""
    print(f"{START_MARKER} {time.time():.3f}", flush=True)


def prepare(argv: list[str]) -> None:
    """Imports the task's executor lean and marks its Do; see the module docstring."""
    import tfx  # noqa: F401  (the real top-level package; only its components/ is bare)

    for name in LAZY_PACKAGES:
        deferred.defer_package_init(name)
    path = _executor_class_path(argv)
    if path:
        from tfx.utils import import_utils

        tfx_compat.announce_do(import_utils.import_class_by_path(path), _mark_start)
    for module, name in ASKED_BASES.items():
        if module not in sys.modules:
            placeholder = types.ModuleType(module)
            setattr(placeholder, name, type(f"Not{name}", (), {}))
            sys.modules[module] = placeholder


UNWRITABLE_STATUS = 2  # as lockstep's own: the place the task writes is refused before it runs
INVOCATION_FLAG = "--json_serialized_invocation_args"  # the task's executor input (KFP v2)
PUSHER_EXECUTOR = "components.pusher.Executor"
RUN_EXECUTOR_FLAG = "--inputs-base64"  # tfx.scripts.run_executor's arguments: a Vertex job's


def places_written(argv: list[str]) -> list[str]:
    """Where the task will write, from its executor input: each output artifact's URI, and the
    serving dir a Pusher is given."""
    raw = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == INVOCATION_FLAG), None)
    if raw is None:
        return []
    executor_input = json.loads(raw)
    places = [artifact["uri"]
              for output in executor_input.get("outputs", {}).get("artifacts", {}).values()
              for artifact in output.get("artifacts", []) if artifact.get("uri")]
    if _executor_class_path(argv) != PUSHER_EXECUTOR:  # the baseline only reads the serving dir
        return places
    serving = executor_input.get("inputs", {}).get("parameterValues", {}).get("serving_dir")
    return places + ([serving] if isinstance(serving, str) and serving else [])


def unwritable(argv: list[str]) -> str:
    """The line for the first place the task cannot write ("" when it can write them all)."""
    from components import fs

    for place in places_written(argv):
        try:
            fs.probe(place if fs.is_uri(place) else fs.nearest_existing(place))
        except Exception as err:  # noqa: BLE001  OSError locally; each object store its own
            reason = getattr(err, "strerror", None) or str(err).strip().splitlines()[-1:] or [""]
            reason = reason if isinstance(reason, str) else reason[0]
            return f"lockstep-task: cannot write {place}: {reason or type(err).__name__}"
    return ""


# Beam's SDK harness boot program, where Beam's SDK images (apache/beam_python3.11_sdk) keep it.
BEAM_BOOT = "/opt/apache/beam/boot"


def beam_worker_args(argv: list[str]) -> bool:
    """Whether this container was started as a Beam SDK worker (Dataflow, or the portable
    runner's DOCKER environment, starts it with its ENTRYPOINT and these flags), not as a task."""
    return any(a.startswith("--provision_endpoint") for a in argv)


def _run_executor(argv: list[str]) -> None:
    """The lean imports, then TFX's entrypoint (or, in a Vertex job, run_executor's)."""
    from runtime import processes

    with processes.imports_uncollected():
        prepare(argv[1:])
        from absl import app

        if RUN_EXECUTOR_FLAG in argv:
            from tfx.scripts import run_executor

            main_fn, parse = run_executor.main, run_executor.parse_flags
        else:
            main_fn, parse = tfx_compat.kubeflow_v2_entrypoint()
    app.run(main_fn, flags_parser=beam_args_parser(parse))


def beam_args_parser(parse: Callable) -> Callable:
    """TFX's task flag parser (its KFP v2 entrypoint's, run_executor's), as absl's app.run calls
    it, with the program's own path left out. TFX hands the parser the whole argv, and
    `parse_known_args` keeps what it does not know as the task's Beam arguments, the program's
    path first. A Beam executor given any Beam argument, and none naming the workers' packages
    (--setup_file, --extra_package, --sdk_container_image...), packages TFX for Beam's workers:
    a copy of TFX's source and a `setup.py sdist`, 1.2 to 2.5 s in every Beam task (CsvExampleGen,
    StatisticsGen, Transform, the Evaluator) whose pipeline then runs in memory, where nothing
    installs it. The spec's own Beam arguments (`beam_args`) still reach the executor."""
    return lambda argv: parse(argv[1:])


def main() -> None:
    if beam_worker_args(sys.argv[1:]):
        # The same image serves Beam's workers when built on a Beam SDK image (infra/README.md).
        if not os.path.exists(BEAM_BOOT):
            sys.exit(f"lockstep: started as a Beam worker, but {BEAM_BOOT} is not in this image: "
                     "build it with --build-arg PYTHON_IMAGE=apache/beam_python3.11_sdk:<beam>")
        os.execv(BEAM_BOOT, [BEAM_BOOT, *sys.argv[1:]])
        return  # not reached: execv replaces this process
    refused = unwritable(sys.argv[1:])
    if refused:
        print(refused, file=sys.stderr, flush=True)
        sys.exit(UNWRITABLE_STATUS)
    from runtime import processes, termination

    executor = (_executor_class_path(sys.argv[1:]) or "the task").rsplit(".Executor", 1)[0]
    stopped = (f"stopped by SIGTERM while {executor} ran; nothing it wrote is published: a retry "
               "runs it again")
    try:
        with termination.stop_on_sigterm(lambda: stopped):
            _run_executor(sys.argv)
    except (termination.Preempted, termination.Stopped) as err:
        print(f"lockstep-task: {err}", file=sys.stderr, flush=True)
        # Not sys.exit: Python's exit would wait for ever on a thread the stopped executor left
        # running (Beam's state sampler, when the raise met its start).
        processes.exit_now(termination.PREEMPTED_STATUS)


if __name__ == "__main__":
    main()
