"""The reference pipeline, as in the TFX tutorials: stock components, module_file, a Resolver for
the baseline, compiled with KubeflowV2DagRunner (compile_time.py times it beside `lockstep
compile`). Stock TFX runs end to end in whole_run.py (reference/tabular_pipeline.py).
usage: pipeline.py DATA_DIR ROOT --kubeflow OUTPUT.json"""

import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from stock import evaluate_and_push
from tfx import v1 as tfx

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "penguin_module.py")


def build(data_dir, root):
    example_gen = tfx.components.CsvExampleGen(input_base=data_dir)
    stats = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema = tfx.components.SchemaGen(statistics=stats.outputs["statistics"])
    validator = tfx.components.ExampleValidator(
        statistics=stats.outputs["statistics"], schema=schema.outputs["schema"])
    transform = tfx.components.Transform(examples=example_gen.outputs["examples"],
                                         schema=schema.outputs["schema"], module_file=MODULE)
    trainer = tfx.components.Trainer(
        module_file=MODULE, examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"], schema=schema.outputs["schema"],
        train_args=tfx.proto.TrainArgs(num_steps=375), eval_args=tfx.proto.EvalArgs(num_steps=5))
    resolver, evaluator, pusher = evaluate_and_push(example_gen, trainer, "species", 0.6, root)
    pipeline = tfx.dsl.Pipeline(
        pipeline_name="reference", pipeline_root=os.path.join(root, "pipeline_root"),
        components=[example_gen, stats, schema, validator, transform, trainer, resolver,
                    evaluator, pusher],
        enable_cache=True)
    return pipeline


def main(data_dir, root, kubeflow_output):
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image="reference:0.1.0"),
        output_dir=os.path.dirname(kubeflow_output),
        output_filename=os.path.basename(kubeflow_output))
    runner.run(build(data_dir, root))


if __name__ == "__main__":
    if sys.argv[3:4] != ["--kubeflow"] or len(sys.argv) != 5:
        sys.exit(__doc__.rsplit("\n", 1)[-1])
    main(sys.argv[1], sys.argv[2], sys.argv[4])
