"""TFX's internals that lockstep uses, behind named functions.

- StatisticsGen, Transform and the Evaluator read through lockstep's batched TFXIO
  (components/batched_records.py): `tfxio_factory` rebinds the factory TFX builds them with.
- Transform keeps an analyzer cache across spans (components/transform.py): `transform_processor`
  rebinds the processor TFX's Transform executor makes, with one that keys each span's dataset
  and notes which came from the cache, in two of its private steps.
- The Trainer hands run_fn its run parameters beside the custom config (components/trainer.py):
  `FnArgsHook` amends the FnArgs TFX's Trainer executor makes in a private step.
- A Beam executor's Beam arguments decide how its pipeline pickles (compat/beam.py):
  `beam_pipeline_args` reads what TFX's Beam executor keeps privately.
- A Kubeflow task starts TFX's KFP v2 entrypoint with its private flag parser, and marks when the
  executor's Do begins (components/entrypoint.py): `kubeflow_v2_entrypoint`, `announce_do`.
- A Beam executor given Beam arguments packages TFX for Beam's workers unless they name the
  workers' packages; where its workers are this process's own Python (compat/beam.py),
  `package_tfx_unless` has it skip that.

TFX is imported inside each function: a Kubeflow task's entrypoint imports this module before
its lean imports (components/entrypoint.py)."""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Callable, Iterator, Protocol

from components.compat.swapped import swapped
from components.compat.symbols import Symbol

_TFXIO_UTILS = "tfx.components.util.tfxio_utils"
_TRANSFORM = "tfx.components.transform.executor"
_KFP_V2 = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
_TRAINER = "tfx.components.trainer.executor"
_DEPENDENCY_UTILS = "tfx.utils.dependency_utils"

_COMPILER = "tfx.dsl.compiler.compiler"
_CONSTANTS = "tfx.dsl.compiler.constants"
_RUNTIME_PARAMETERS = "tfx.orchestration.portable.runtime_parameter_utils"
_RUNNER_UTILS = "tfx.orchestration.local.runner_utils"
_LAUNCHER = "tfx.orchestration.portable.launcher"
SYMBOLS = (
    Symbol(_TFXIO_UTILS, "make_tfxio", read_by=_TFXIO_UTILS),
    Symbol(_TRANSFORM, "TransformProcessor", read_by=_TRANSFORM),
    Symbol(_TRANSFORM, "TransformProcessor._MakeDatasetList"),
    Symbol(_TRANSFORM, "TransformProcessor._JoinUncachedDatasets"),
    Symbol(_TRAINER, "GenericExecutor._GetFnArgs"),
    Symbol(_KFP_V2, "_parse_flags"),
    Symbol("tfx.dsl.components.base.base_executor", "BaseExecutor.Do"),
    Symbol("tfx.dsl.components.base.base_beam_executor", "BaseBeamExecutor._beam_pipeline_args"),
    Symbol(_DEPENDENCY_UTILS, "make_beam_dependency_flags",
           read_by="tfx.dsl.components.base.base_beam_executor"),
    # The local DAG runner's pieces of TFX's orchestration (pipeline/local/): not in tfx.v1.
    Symbol(_COMPILER, "Compiler.compile"),
    Symbol(_CONSTANTS, "PIPELINE_RUN_ID_PARAMETER_NAME"),
    Symbol(_CONSTANTS, "PIPELINE_RUN_CONTEXT_TYPE_NAME"),
    Symbol(_RUNTIME_PARAMETERS, "substitute_runtime_parameter"),
    Symbol(_RUNNER_UTILS, "extract_local_deployment_config"),
    Symbol(_RUNNER_UTILS, "extract_executor_spec"),
    Symbol(_RUNNER_UTILS, "extract_custom_driver_spec"),
    Symbol(_LAUNCHER, "Launcher.launch"),
    Symbol("tfx.orchestration.metadata", "Metadata"),
)


def tfxio_factory(make_tfxio: Callable):
    """For the block, `tfxio_utils.make_tfxio` is `make_tfxio`: TFX's StatisticsGen, Transform
    and Evaluator build their TFXIO through tfxio_utils' factories, which call it by that name."""
    from tfx.components.util import tfxio_utils

    return swapped(tfxio_utils, "make_tfxio", make_tfxio)


class DatasetHooks(Protocol):
    """What Transform's processor asks lockstep (components/transform.py)."""

    def inputs(self, inputs: dict) -> dict:
        """Transform's inputs (by tfx.components.transform.labels) as the processor gets them."""

    def datasets(self, datasets: list) -> list:
        """Each list of datasets the processor makes (to analyze, then to transform), with each
        dataset's dataset_key and index as it should read them."""

    def joined(self, optimized_analyze_data_dict: dict) -> None:
        """{dataset key: dataset, or None where the input cache holds its every analyzer}."""


@contextlib.contextmanager
def transform_processor(hooks: DatasetHooks) -> Iterator[None]:
    """For the block, the TransformProcessor TFX's Transform executor makes (it looks the class
    up in its module, in Do) calls `hooks` around its private _MakeDatasetList and
    _JoinUncachedDatasets."""
    from tfx.components.transform import executor

    class Processor(executor.TransformProcessor):
        def Transform(self, inputs, outputs, status_file=None):
            return super().Transform(hooks.inputs(inputs), outputs, status_file)

        def _MakeDatasetList(self, *args, **kwargs):
            return hooks.datasets(super()._MakeDatasetList(*args, **kwargs))

        def _JoinUncachedDatasets(self, analyze_data_list, optimized_analyze_data_dict, *args,
                                  **kwargs):
            hooks.joined(optimized_analyze_data_dict)
            return super()._JoinUncachedDatasets(analyze_data_list, optimized_analyze_data_dict,
                                                 *args, **kwargs)

    with swapped(executor, "TransformProcessor", Processor):
        yield


class FnArgsHook:
    """Put before TFX's Trainer executor (GenericExecutor) among an executor's bases: the FnArgs
    its Do hands run_fn, which it makes in its private _GetFnArgs, pass through the executor's
    `fn_args(fn_args, exec_properties)` first."""

    def fn_args(self, fn_args, exec_properties: dict):
        return fn_args

    def _GetFnArgs(self, input_dict, output_dict, exec_properties):
        return self.fn_args(super()._GetFnArgs(input_dict, output_dict, exec_properties),
                            exec_properties)


def kubeflow_v2_entrypoint() -> tuple[Callable, Callable]:
    """(main, flags parser) of TFX's KFP v2 executor entrypoint, for absl's app.run as the
    module's own `__main__` calls it: main takes the parser's (arguments, Beam arguments), and the
    parser is private."""
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    return kubeflow_v2_run_executor.main, kubeflow_v2_run_executor._parse_flags


def announce_do(executor_cls: type, announce: Callable[[], None]) -> None:
    """From now on, in this process, the executor class's Do calls `announce()` first."""
    do = executor_cls.Do

    def announced_do(self, *args, **kwargs):
        announce()
        return do(self, *args, **kwargs)

    executor_cls.Do = announced_do


def beam_pipeline_args(executor) -> list[str] | None:
    """The Beam arguments a Beam executor makes its pipelines with (its context's, with what TFX
    adds); None for an object that is not a Beam executor."""
    args = getattr(executor, "_beam_pipeline_args", None)
    return list(args) if isinstance(args, (list, tuple)) else None


def package_tfx_unless(workers_are_here: Callable[[list[str]], bool],
                       here: Callable[[list[str]], list[str]] = list) -> None:
    """From now on, in this process, a Beam executor made with Beam arguments for which
    `workers_are_here(args)` is true gets `here(args)` (default: them as they are). TFX's own rule
    (`make_beam_dependency_flags`, which each Beam executor applies to its arguments as it is
    made) adds `--extra_package=` with an sdist of TFX it builds, 1.4 to 1.6 s of a process each
    time, unless the arguments name the workers' packages (extra packages, a setup or
    requirements file, an SDK container image); it still does for every other argument list.
    Nothing until TFX's Beam executors are loaded (their base loads `dependency_utils`; a lockstep
    Beam executor's module loads them before it calls this): no process imports TFX for it."""
    dependency_utils = sys.modules.get(_DEPENDENCY_UTILS)
    if dependency_utils is None:
        return
    make = dependency_utils.make_beam_dependency_flags
    if getattr(make, "workers_are_here", None) is not None:
        make = make.__wrapped__

    @functools.wraps(make)
    def make_beam_dependency_flags(beam_pipeline_args):
        if workers_are_here(list(beam_pipeline_args)):
            return here(list(beam_pipeline_args))
        return make(beam_pipeline_args)

    make_beam_dependency_flags.workers_are_here = workers_are_here
    dependency_utils.make_beam_dependency_flags = make_beam_dependency_flags


# --- TFX's orchestration, as the local DAG runner drives it (pipeline/local/) -------------------

def compile_ir(pipeline):
    """The pipeline's IR (TFX's compiler, as LocalDagRunner compiles)."""
    from tfx.dsl.compiler import compiler

    return compiler.Compiler().compile(pipeline)


def set_run_id(ir, run_id: str) -> None:
    """The IR's run id runtime parameter set to `run_id`."""
    from tfx.dsl.compiler import constants
    from tfx.orchestration.portable import runtime_parameter_utils

    runtime_parameter_utils.substitute_runtime_parameter(
        ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id})


def run_context_type() -> str:
    """The ML Metadata context type of a pipeline run."""
    from tfx.dsl.compiler import constants

    return constants.PIPELINE_RUN_CONTEXT_TYPE_NAME


def metadata_connection(ir):
    """The ML Metadata connection config of the IR's local deployment."""
    from tfx.orchestration.local import runner_utils

    deployment = runner_utils.extract_local_deployment_config(ir)
    config = deployment.metadata_connection_config
    return getattr(config, config.WhichOneof("connection_config"))


def metadata_class():
    """TFX's ML Metadata handle class (a `with` of it is one session)."""
    from tfx.orchestration import metadata

    return metadata.Metadata


def launch(ir, node_id: str, mlmd_connection):
    """Runs one node of the IR as LocalDagRunner does (driver, cache, executor, publishing)
    through TFX's portable launcher; its ExecutionInfo (None where nothing ran)."""
    from tfx.orchestration.local import runner_utils
    from tfx.orchestration.portable import launcher

    deployment = runner_utils.extract_local_deployment_config(ir)
    node = next(n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == node_id)
    return launcher.Launcher(
        pipeline_node=node, mlmd_connection=mlmd_connection,
        pipeline_info=ir.pipeline_info, pipeline_runtime_spec=ir.runtime_spec,
        executor_spec=runner_utils.extract_executor_spec(deployment, node_id),
        custom_driver_spec=runner_utils.extract_custom_driver_spec(deployment, node_id),
    ).launch()


def import_launcher() -> None:
    """TFX's launcher and its imports loaded (a worker does it once, before it forks)."""
    from tfx.orchestration.local import runner_utils  # noqa: F401 - loaded, not used here
    from tfx.orchestration.portable import launcher  # noqa: F401 - loaded, not used here
