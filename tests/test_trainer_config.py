"""The one contract from config to Trainer (trainer_module/config.py): what the pipeline writes
is read back into the same dataclass, strictly; the task is decided once."""

import dataclasses

import pytest

import numpy as np

from pipeline import config as config_lib, data_check
from pipeline import pipeline as pipeline_lib
from trainer_module.config import (CLASSIFICATION, MAX_INTEGER_CLASSES, REGRESSION,
                                   RUN_PARAMETERS, TrainerConfig, TrainerConfigError, TrainSpec,
                                   TransformSpec, task_for_label)


def test_run_parameters_are_derived_from_the_config_fields():
    assert RUN_PARAMETERS == {"per_replica_batch": int, "epochs": float, "train_examples": int,
                              "train_steps": int, "base_learning_rate": float}
    marked = {f.name for f in dataclasses.fields(TrainerConfig) if f.metadata.get("run_parameter")}
    assert marked == set(RUN_PARAMETERS)


def test_what_the_pipeline_writes_the_trainer_reads_back():
    config = config_lib.load(None, {"trainer.hidden_units": [8], "trainer.l2": 0.5})
    written = pipeline_lib.train_spec(config, "species", CLASSIFICATION).to_custom_config()
    read = TrainSpec.from_custom_config(written)
    assert read.label == "species" and read.task == CLASSIFICATION
    assert read.trainer == config.trainer
    # A Kubeflow run's parameters arrive as JSON numbers and override the config's values.
    overridden = TrainSpec.from_custom_config(written, {"train_steps": 500.0,
                                                        "base_learning_rate": 1, "train_examples": None})
    assert overridden.trainer.train_steps == 500 and isinstance(overridden.trainer.train_steps, int)
    assert overridden.trainer.base_learning_rate == 1.0
    assert overridden.trainer.train_examples == config.trainer.train_examples


@pytest.mark.parametrize("change, message", [
    (lambda d: d["trainer"].update(train_step=5), "unknown trainer key(s) train_step"),
    (lambda d: (d["trainer"].pop("train_steps"), d["trainer"].update(steps=5)),
     "unknown trainer key(s) steps"),
    (lambda d: d["trainer"].update(train_steps="5"), "trainer.train_steps must be int, got '5'"),
    (lambda d: d["trainer"].update(jit_compile=1), "trainer.jit_compile must be bool, got 1"),
    (lambda d: d["trainer"].update(per_replica_batch=True), "trainer.per_replica_batch must be int"),
    (lambda d: d.update(extra=1), "Trainer custom_config: unknown key(s) extra"),
    (lambda d: d.pop("task"), "Trainer custom_config: missing key(s) task"),
    (lambda d: d.update(task="ranking"), "task must be classification or regression"),
])
def test_a_renamed_unknown_or_mistyped_trainer_key_fails_loudly(change, message):
    written = TrainSpec("y", REGRESSION, TrainerConfig()).to_custom_config()
    change(written)
    with pytest.raises(TrainerConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainSpec.from_custom_config(written)


def test_an_unknown_run_parameter_fails():
    written = TrainSpec("y", REGRESSION, TrainerConfig()).to_custom_config()
    with pytest.raises(TrainerConfigError, match="unknown run parameter 'seed'"):
        TrainSpec.from_custom_config(written, {"seed": 3})


def test_transform_spec_is_strict_too():
    assert TransformSpec.from_custom_config({"label": "y", "task": REGRESSION}) == TransformSpec(
        "y", REGRESSION)
    with pytest.raises(TrainerConfigError, match="missing key"):
        TransformSpec.from_custom_config({"label": "y"})


def test_the_task_rule_for_a_label_column():
    assert task_for_label("string", 3)[0] == CLASSIFICATION
    assert task_for_label("float", 2)[0] == REGRESSION
    assert task_for_label("int", MAX_INTEGER_CLASSES)[0] == CLASSIFICATION
    task, why = task_for_label("int", 3412)
    assert task == REGRESSION
    assert why == f"integer label with 3412 distinct values, more than {MAX_INTEGER_CLASSES}"


def test_eval_config_per_task():
    config = config_lib.load(None, {"eval.min_accuracy": 0.7, "eval.max_rmse": 12.5})
    classification = pipeline_lib.eval_config(config, "species", CLASSIFICATION)
    [spec] = classification.model_specs
    assert (spec.label_key, spec.prediction_key) == ("species_xf", "probabilities")
    metric = classification.metrics_specs[0].metrics[0]
    assert metric.class_name == "SparseCategoricalAccuracy"
    assert metric.threshold.value_threshold.lower_bound.value == 0.7
    assert metric.threshold.change_threshold.absolute.value == -0.01
    regression = pipeline_lib.eval_config(config, "price", REGRESSION)
    assert regression.model_specs[0].prediction_key == "predictions"
    metric = regression.metrics_specs[0].metrics[0]
    assert metric.class_name == "RootMeanSquaredError"
    assert metric.threshold.value_threshold.upper_bound.value == 12.5
    # A regression is never without an absolute bound: a first model must meet it.
    with pytest.raises(config_lib.ConfigError, match="eval.max_rmse: a regression model needs"):
        pipeline_lib.eval_config(config_lib.load(None), "price", REGRESSION)


def test_a_regression_bound_defaults_to_the_label_spread(tmp_path):
    from conftest import lockstep

    rows = ["x,y"] + [f"{i},{i * 10}" for i in range(200)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    data = data_check.check(str(tmp_path / "d.csv"), "y", ["", "NA"])
    assert data.task == REGRESSION
    assert abs(data.rmse_bound() - np.std(np.arange(200) * 10.0)) < 1e-6
    result = lockstep("compile", "--data", tmp_path / "d.csv", "--label", "y",
                      "--output", tmp_path / "p.yaml")
    assert result.returncode == 0, result.stderr
    assert f'upper_bound\\": {data.rmse_bound()}\\n' in (tmp_path / "p.yaml").read_text()
    remote = lockstep("compile", "--data", "gs://b/d", "--label", "y", "--task", "regression",
                      "--output", tmp_path / "q.yaml")
    assert remote.returncode == 2 and "eval.max_rmse: a regression model needs" in remote.stderr


def test_eval_slices_keep_the_gate_on_the_whole_eval_split():
    config = config_lib.load(None, {"eval.slices": ["island", "sex"]})
    sliced = pipeline_lib.eval_config(config, "species", CLASSIFICATION)
    assert [list(s.feature_keys) for s in sliced.slicing_specs] == [[], ["island"], ["sex"]]
    metric = sliced.metrics_specs[0].metrics[0]
    assert not metric.HasField("threshold")
    [gate] = metric.per_slice_thresholds
    assert [list(s.feature_keys) for s in gate.slicing_specs] == [[]]
    assert gate.threshold.value_threshold.lower_bound.value == 0.8
