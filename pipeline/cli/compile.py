"""`lockstep compile`: the Kubeflow Pipelines v2 spec, compiled with import stand-ins (3 s)."""

from __future__ import annotations

import sys

from pipeline.cli.common import add_config_arg, load_config


def add_parser(sub) -> None:
    from trainer_module.settings import RUN_PARAMETERS

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
    comp.add_argument("--slice", help="a TPU slice for the Trainer, e.g. v5e-4 (one host, a GKE "
                                      "node pool) or v5e-16 (several hosts, a Vertex AI job)")
    comp.set_defaults(func=command)


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def command(args) -> int:
    from pipeline.use_cases import compiling

    config = load_config(args, {"data.path": args.data, "data.label": args.label,
                                "data.task": args.task,
                                "paths.pipeline_root": args.pipeline_root,
                                "paths.serving_dir": args.serving_dir,
                                "trainer.tpu_slice": args.slice})
    result = compiling.compile_spec(config, args.output, args.image, again=args.argv, say=_say)
    if result.fallback:  # compiled again in a fresh process, which said what it wrote
        return result.status
    trainer = config.trainer.tpu_slice or (f"{config.kubeflow.gpus} GPU(s)" if config.kubeflow.gpus
                                           else "CPU")
    spec = result.compiled.pipeline_spec
    print(f"lockstep: wrote {args.output} ({len(spec.root.dag.tasks)} tasks, image "
          f"{result.compiled.image}, Trainer on {trainer}) in {result.seconds:.1f}s")
    return 0
