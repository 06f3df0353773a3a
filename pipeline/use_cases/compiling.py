"""`lockstep compile`: the Kubeflow Pipelines v2 spec for a config, written atomically, with
TensorFlow & co. replaced by import stand-ins (pipeline/kubeflow/import_stubs.py) for a compile of
seconds; where a stand-in falls short, the same command again in a fresh process with the real
imports.

It takes the same decisions as a run (preparing.py), reads local data as a run would and no
remote data. It needs no network or credentials and writes nothing but the spec: it probes no
pipeline root or serving dir (a run does, where it runs; a Kubeflow task probes its own places,
components/entrypoint.py).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING

from pipeline.config import Config, ConfigError
from pipeline.use_cases import Say, preparing, quiet

if TYPE_CHECKING:
    from pipeline.kubeflow.compiler import Compiled


@dataclasses.dataclass(frozen=True)
class Compilation:
    """What a compile did: the spec written to `output` in `seconds`; or, where compiling with
    the stand-ins failed, why (`fallback`) and the exit status of the compile run again in a
    fresh process with the real imports (`status`; None: not run again)."""

    output: str
    compiled: Compiled | None = None
    seconds: float = 0.0
    fallback: str = ""
    status: int | None = None


def compile_spec(config: Config, output: str, image: str | None = None, *,
                 again: list[str] | None = None, say: Say = quiet) -> Compilation:
    """Compiles the Kubeflow Pipelines v2 spec for this config to `output`, atomically.

    Local data is read, as before a run, for the task, the columns' roles and the gate's
    baselines; remote data is not: they come from the config.

    Args:
      image: the component image (default: the config's, tagged).
      again: the command's arguments (`lockstep <again>`): where a stand-in fails, that command
        runs again in a fresh process with the stand-ins off (None: only say why, in `fallback`).
      say: called with the line that says a stand-in failed, before the command runs again.
    Returns:
      the Compilation.
    Raises:
      ConfigError (and CompileError): a setting that cannot be compiled, named.
    """
    from pipeline.kubeflow import import_stubs

    decisions = preparing.prepare(config, places=False).decisions
    tic = time.perf_counter()
    stubbed = import_stubs.install()
    try:
        from pipeline import orchestrators
        from pipeline.kubeflow import compiler

        compiled = orchestrators.get(orchestrators.KUBEFLOW).compile(config, decisions, image)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001  any failure of a stand-in: compile for real
        if not stubbed:
            raise
        first = str(err).splitlines()[0] if str(err) else ""
        fallback = f"{type(err).__name__}: {first}"
        if again is None:
            return Compilation(output, fallback=fallback)
        say(f"lockstep: compiling with import stand-ins failed ({fallback}); compiling again "
            "with the real imports")
        return Compilation(output, fallback=fallback, status=_without_stand_ins(again))
    compiler.write(compiled, output)
    return Compilation(output, compiled, time.perf_counter() - tic)


def _without_stand_ins(argv: list[str]) -> int:
    """Runs `lockstep <argv>` again in a fresh process with the stand-ins off; its exit status."""
    import subprocess

    from pipeline import entry_point
    from pipeline.kubeflow import import_stubs

    env = dict(os.environ, **{import_stubs.DISABLE_ENV: "1"})
    return subprocess.run([*entry_point.command(), *argv], env=env).returncode
