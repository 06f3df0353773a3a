"""`lockstep compile`: the Kubeflow Pipelines v2 spec, compiled with import stand-ins (3 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pipeline.cli.common import add_config_arg, load_config
from pipeline.cli.errors import UsageError


def add_parser(sub) -> None:
    from trainer_module.config import RUN_PARAMETERS

    comp = sub.add_parser(
        "compile", help="write the Kubeflow Pipelines v2 spec (YAML) with KubeflowV2DagRunner",
        description="Compile for Kubeflow Pipelines v2. Needs no network or credentials and "
                    "writes nothing but the output file. Data root, pipeline root and serving "
                    "dir are URIs (gs://, s3://, or paths the pods can see); "
                    f"{', '.join(RUN_PARAMETERS)} and data_root are pipeline parameters a run "
                    "can override.")
    add_config_arg(comp)
    comp.add_argument("--image", help="the component image (default: kubeflow.image, tagged with "
                                      "kubeflow.image_tag or the package version)")
    comp.add_argument("--output", default="pipeline.yaml", help="where to write the spec")
    comp.add_argument("--data", help="the data root (overrides data.path)")
    comp.add_argument("--label", help="the label column (overrides data.label)")
    comp.add_argument("--task", choices=["classification", "regression"],
                      help="the task (overrides data.task; needed for remote data)")
    comp.add_argument("--pipeline-root", help="overrides paths.pipeline_root")
    comp.add_argument("--serving-dir", help="overrides paths.serving_dir")
    comp.add_argument("--slice", help="a single-host TPU slice for the Trainer, e.g. v5e-4")
    comp.set_defaults(func=command)


def task_for_compile(config) -> str:
    """The task without reading remote data: from config, else from the local data. A
    regression's default bound (eval.max_rmse) comes from local data too."""
    from pipeline import config as config_lib, data_check

    remote = config_lib.is_uri(config.data.path)
    if config.data.task == "auto" and remote:
        raise UsageError(f"data.path {config.data.path} is remote and compile reads no remote "
                         "data: set data.task to classification or regression")
    if remote or (config.data.task == "classification"
                  or (config.data.task == "regression" and config.eval.max_rmse)):
        return config.data.task
    data = data_check.check(config.data.path, config.data.label, config.data.missing_values,
                            config.data.span_pattern, config.data.span_window, config.data.task,
                            config.data.span_marker)
    if data.task == "regression" and not config.eval.max_rmse:
        config.eval.max_rmse = data.rmse_bound() or 0.0
    return data.task


def _compile_with_stand_ins(config, task: str, image: str | None):
    """compile_pipeline with TensorFlow & co. replaced by stand-ins (pipeline/import_stubs.py).
    Returns None when the stand-ins failed and compiling must happen again for real; a
    CompileError (or any ConfigError) is the user's and propagates."""
    from pipeline import import_stubs
    from pipeline.config import ConfigError

    stubbed = import_stubs.install()
    try:
        from pipeline import kubeflow_runner

        return kubeflow_runner.compile_pipeline(config, task, image)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001  any failure of a stand-in: compile for real
        if not stubbed:
            raise
        print(f"lockstep: compiling with import stand-ins failed ({type(err).__name__}: "
              f"{str(err).splitlines()[0] if str(err) else ''}); compiling again with the real "
              "imports", file=sys.stderr)
        return None


def command(args) -> int:
    from pipeline import import_stubs

    config = load_config(args, {"data.path": args.data, "data.label": args.label,
                                "data.task": args.task,
                                "paths.pipeline_root": args.pipeline_root,
                                "paths.serving_dir": args.serving_dir,
                                "trainer.tpu_slice": args.slice})
    task = task_for_compile(config)
    tic = time.perf_counter()
    compiled = _compile_with_stand_ins(config, task, args.image)
    if compiled is None:  # a fresh process, without the stand-ins
        env = dict(os.environ, **{import_stubs.DISABLE_ENV: "1"})
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args.argv], env=env).returncode
    from pipeline import kubeflow_runner

    kubeflow_runner.write(compiled, args.output)
    trainer = config.trainer.tpu_slice or (f"{config.kubeflow.gpus} GPU(s)" if config.kubeflow.gpus
                                           else "CPU")
    print(f"lockstep: wrote {args.output} ({len(compiled.pipeline_spec.root.dag.tasks)} tasks, "
          f"image {compiled.image}, Trainer on {trainer}) in {time.perf_counter() - tic:.1f}s")
    return 0
