"""The pipeline's node ids, as ML Metadata, the compiled spec and the run summary name them.

Light (no TFX): the orchestrators and the report name nodes without loading the definition
(pipeline/definition.py, which builds the nodes under these ids)."""

EXAMPLE_GEN_NODE = "CsvExampleGen"
STATISTICS_NODE = "StatisticsGen"
SCHEMA_NODE = "SchemaGen"
VALIDATOR_NODE = "ExampleValidator"
TRANSFORM_NODE = "Transform"
BASELINE_NODE = "LatestPushedModel"
TRAINER_NODE = "Trainer"
REFERENCE_NODE = "GradientBoosting"
EVALUATOR_NODE = "Evaluator"
PUSHER_NODE = "Pusher"
