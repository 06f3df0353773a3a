"""`lockstep compile`: the Kubeflow Pipelines v2 spec, compiled with import stand-ins (3 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pipeline.cli.common import add_config_arg, load_config


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


def _compile_with_stand_ins(config, decisions, image: str | None):
    """compile_pipeline with TensorFlow & co. replaced by stand-ins (pipeline/kubeflow/import_stubs.py).
    Returns None when the stand-ins failed and compiling must happen again for real; a
    CompileError (or any ConfigError) is the user's and propagates."""
    from pipeline.kubeflow import import_stubs
    from pipeline.config import ConfigError

    stubbed = import_stubs.install()
    try:
        from pipeline.kubeflow import compiler

        return compiler.compile_pipeline(config, decisions, image)
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
    from pipeline.kubeflow import import_stubs

    config = load_config(args, {"data.path": args.data, "data.label": args.label,
                                "data.task": args.task,
                                "paths.pipeline_root": args.pipeline_root,
                                "paths.serving_dir": args.serving_dir,
                                "trainer.tpu_slice": args.slice})
    from pipeline import preflight

    # Local data is read, as before a run, for the task, the columns' roles and the gate's
    # baselines; remote data is not: they come from the config.
    decisions = preflight.decide(config, preflight.check_local(config))
    tic = time.perf_counter()
    compiled = _compile_with_stand_ins(config, decisions, args.image)
    if compiled is None:  # a fresh process, without the stand-ins
        env = dict(os.environ, **{import_stubs.DISABLE_ENV: "1"})
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args.argv], env=env).returncode
    from pipeline.kubeflow import compiler

    compiler.write(compiled, args.output)
    trainer = config.trainer.tpu_slice or (f"{config.kubeflow.gpus} GPU(s)" if config.kubeflow.gpus
                                           else "CPU")
    print(f"lockstep: wrote {args.output} ({len(compiled.pipeline_spec.root.dag.tasks)} tasks, "
          f"image {compiled.image}, Trainer on {trainer}) in {time.perf_counter() - tic:.1f}s")
    return 0
