"""The reference pipeline for any tabular CSV, as in the TFX tutorials: stock components,
tabular_module.py as module_file, a Resolver for the baseline, LocalDagRunner; absl logs at INFO
on stderr (LocalDagRunner's "Component X is running." / "is finished." give the stage times).
The train/eval split is 4:1 hash buckets, as lockstep's.
usage: tabular_pipeline.py DATA ROOT COLUMNS_JSON TRAIN_STEPS BATCH_SIZE
  DATA: a directory of CSV files or one CSV file; COLUMNS_JSON: see tabular_module.py."""

import json
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import app, logging
from stock import evaluate_and_push
from tfx import v1 as tfx

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tabular_module.py")


def build(data, root, columns_file, train_steps, batch_size):
    with open(columns_file) as f:
        label = json.load(f)["label"]
    pattern = "*.csv" if os.path.isdir(data) else os.path.basename(data)
    example_gen = tfx.components.CsvExampleGen(
        input_base=data if os.path.isdir(data) else os.path.dirname(os.path.abspath(data)),
        input_config=tfx.proto.Input(splits=[tfx.proto.Input.Split(name="single_split",
                                                                   pattern=pattern)]),
        output_config=tfx.proto.Output(split_config=tfx.proto.SplitConfig(splits=[
            tfx.proto.SplitConfig.Split(name="train", hash_buckets=4),
            tfx.proto.SplitConfig.Split(name="eval", hash_buckets=1)])))
    stats = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema = tfx.components.SchemaGen(statistics=stats.outputs["statistics"])
    validator = tfx.components.ExampleValidator(
        statistics=stats.outputs["statistics"], schema=schema.outputs["schema"])
    custom_config = {"columns": os.path.abspath(columns_file), "batch_size": batch_size}
    transform = tfx.components.Transform(examples=example_gen.outputs["examples"],
                                         schema=schema.outputs["schema"], module_file=MODULE,
                                         custom_config=custom_config)
    trainer = tfx.components.Trainer(
        module_file=MODULE, examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"], schema=schema.outputs["schema"],
        train_args=tfx.proto.TrainArgs(num_steps=train_steps),
        eval_args=tfx.proto.EvalArgs(num_steps=5), custom_config=custom_config)
    resolver, evaluator, pusher = evaluate_and_push(example_gen, trainer, label, 0.5, root)
    return tfx.dsl.Pipeline(
        pipeline_name="tabular-reference", pipeline_root=os.path.join(root, "pipeline_root"),
        components=[example_gen, stats, schema, validator, transform, trainer, resolver,
                    evaluator, pusher],
        enable_cache=True,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.sqlite")))


def main(argv):
    logging.set_verbosity(logging.INFO)
    data, root, columns_file, train_steps, batch_size = argv[1:]
    tfx.orchestration.LocalDagRunner().run(
        build(data, root, columns_file, int(train_steps), int(batch_size)))


if __name__ == "__main__":
    app.run(main)
