"""kfp.local's names that lockstep rebinds, to run TFX's container components under KFP's local
orchestrator (pipeline/local/kfp_local.py says why each): none is private, but kfp.local offers no
way to choose a task handler or how an output artifact is typed or a task directory named, and
each is looked up by its module's name when a task runs."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from components.compat.swapped import swapped
from components.compat.symbols import Symbol

_DISPATCHER = "kfp.local.task_dispatcher"  # runs each task: picks its handler, names its dir
_OUTPUTS = "kfp.local.executor_output_utils"

SYMBOLS = (
    Symbol("kfp.local.subprocess_task_handler", "SubprocessTaskHandler", read_by=_DISPATCHER),
    Symbol("kfp.local.docker_task_handler", "DockerTaskHandler", read_by=_DISPATCHER),
    Symbol(_OUTPUTS, "runtime_artifact_to_dsl_artifact", read_by=_OUTPUTS),
    Symbol("kfp.local.executor_input_utils", "get_local_task_resource_name", read_by=_DISPATCHER),
)

Wrap = Callable[[Callable], Callable]  # kfp.local's function -> the one used in its place


@contextlib.contextmanager
def local_bridged(subprocess_handler: type, docker_handler: type, artifact_from_runtime: Wrap,
                  task_resource_name: Wrap) -> Iterator[None]:
    """For the block, kfp.local runs each task with `subprocess_handler` (SubprocessRunner) or
    `docker_handler` (DockerRunner), each standing in for its task handler (same constructor and
    `run`), and uses `artifact_from_runtime(its own)` to make an output's dsl.Artifact and
    `task_resource_name(its own)` to name a task's directory."""
    from kfp.local import (docker_task_handler, executor_input_utils, executor_output_utils,
                           subprocess_task_handler)

    convert = executor_output_utils.runtime_artifact_to_dsl_artifact
    name = executor_input_utils.get_local_task_resource_name
    with swapped(subprocess_task_handler, "SubprocessTaskHandler", subprocess_handler), \
            swapped(docker_task_handler, "DockerTaskHandler", docker_handler), \
            swapped(executor_output_utils, "runtime_artifact_to_dsl_artifact",
                    artifact_from_runtime(convert)), \
            swapped(executor_input_utils, "get_local_task_resource_name",
                    task_resource_name(name)):
        yield
