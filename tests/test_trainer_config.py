"""The one contract from config to Trainer (trainer_module/settings.py): what the pipeline writes
is read back into the same dataclass, strictly; the task is decided once."""

import dataclasses
import re

import pytest

import numpy as np

from pipeline import config as config_lib, data_check
from pipeline.config import DataConfig
from pipeline import definition
from pipeline.data_check import MAX_INTEGER_CLASSES, task_for_label
from trainer_module.custom_config import TrainSpec, TransformSpec
from trainer_module.settings import (CLASSIFICATION, REGRESSION, RUN_PARAMETERS,
                                     TrainerConfig, TrainerConfigError, trainer_config_from_dict)


def test_run_parameters_are_derived_from_the_config_fields():
    assert RUN_PARAMETERS == {"per_replica_batch": int, "epochs": float, "train_examples": int,
                              "train_steps": int, "base_learning_rate": float,
                              "accumulation_steps": int}
    marked = {f.name for f in dataclasses.fields(TrainerConfig) if f.metadata.get("run_parameter")}
    assert marked == set(RUN_PARAMETERS)


def test_what_the_pipeline_writes_the_trainer_reads_back():
    config = config_lib.load(None, {"trainer.hidden_units": [8], "trainer.l2": 0.5})
    written = definition.train_spec(config, "species", CLASSIFICATION).to_custom_config()
    read = TrainSpec.from_custom_config(written)
    assert read.label == "species" and read.task == CLASSIFICATION
    assert read.trainer == config.trainer
    # A Kubeflow run's parameters arrive as JSON numbers and override the config's values.
    overridden = TrainSpec.from_custom_config(written, run_parameters={
        "train_steps": 500.0, "base_learning_rate": 1, "train_examples": None,
        "custom_config": "(the Trainer's other properties are not the codec's)"})
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
    (lambda d: d["trainer"].update(decay_share=1.0),
     "trainer.decay_share must be at least 0 and below 1, got 1.0"),
])
def test_a_renamed_unknown_or_mistyped_trainer_key_fails_loudly(change, message):
    written = TrainSpec("y", REGRESSION, TrainerConfig()).to_custom_config()
    change(written)
    with pytest.raises(TrainerConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainSpec.from_custom_config(written)


def test_a_run_parameter_of_the_wrong_type_fails_and_a_setting_that_is_none_is_not_one():
    written = TrainSpec("y", REGRESSION, TrainerConfig(seed=7)).to_custom_config()
    with pytest.raises(TrainerConfigError, match="train_steps"):
        TrainSpec.from_custom_config(written, run_parameters={"train_steps": "many"})
    # Only RUN_PARAMETERS fold in: a property of the same name as another setting does not.
    assert TrainSpec.from_custom_config(written, run_parameters={"seed": 3}).trainer.seed == 7


def test_the_numeric_columns_come_packed_for_the_built_in_model_only():
    """The Transform packs the numeric columns in one tensor for the built-in model; a user's
    trainer.model reads them a feature each, as docs/your-model.md says."""
    from pipeline.preflight import Decisions

    decisions = Decisions(CLASSIFICATION, "", None)
    built_in = config_lib.load(None, {})
    users = config_lib.load(None, {"trainer.model": "mine.model:build"})
    assert definition.transform_spec(built_in, decisions).packed
    assert not definition.transform_spec(users, decisions).packed


def test_transform_spec_is_strict_too():
    written = {"label": "y", "task": REGRESSION, "excluded": ["id"], "timestamps": ["t"],
               "preprocessing_fn": "mine.prep:fn", "code_fingerprint": "abc",
               "timestamp_orders": {"t": "dmy"}, "hashed": ["note"], "large": ["user"],
               "min_count": 3, "max_vocabulary": 1000, "coded": ["rate"], "packed": True}
    spec = TransformSpec("y", REGRESSION, ("id",), ("t",), "mine.prep:fn", "abc", {"t": "dmy"},
                         ("note",), ("user",), 3, 1000, ("rate",), True)
    assert TransformSpec.from_custom_config(written) == spec
    assert spec.to_custom_config() == written
    with pytest.raises(TrainerConfigError, match="missing key"):
        TransformSpec.from_custom_config({"label": "y"})
    with pytest.raises(TrainerConfigError, match="timestamp_orders must map columns to one of "
                                                 "ymd, mdy, dmy, epoch, got {'t': 'ydm'}"):
        TransformSpec.from_custom_config({**written, "timestamp_orders": {"t": "ydm"}})
    with pytest.raises(TrainerConfigError, match="min_count must be a whole number of at least 1"):
        TransformSpec.from_custom_config({**written, "min_count": 0})
    with pytest.raises(TrainerConfigError, match="coded must be a list of column names"):
        TransformSpec.from_custom_config({**written, "coded": "rate"})
    with pytest.raises(TrainerConfigError, match="packed must be true or false, got 'yes'"):
        TransformSpec.from_custom_config({**written, "packed": "yes"})


def test_the_task_rule_for_a_label_column():
    assert task_for_label("string", 3)[0] == CLASSIFICATION
    assert task_for_label("float", 2)[0] == REGRESSION
    assert task_for_label("int", MAX_INTEGER_CLASSES)[0] == CLASSIFICATION
    task, why = task_for_label("int", 3412)
    assert task == REGRESSION
    assert why == f"integer label with 3412 distinct values, more than {MAX_INTEGER_CLASSES}"


def _gate(task, counts=None, std=None, **values):
    from pipeline import evaluation

    config = config_lib.load(None, {f"eval.{k}": v for k, v in values.items()})
    return evaluation.decide(config.eval, task, counts, std), config


def test_eval_config_per_task():
    from pipeline import evaluation

    gate, config = _gate(CLASSIFICATION, {"a": 5, "b": 3, "c": 2}, bounds={"accuracy": 0.7})
    classification = evaluation.eval_config(gate, "species", [], config.eval.max_regression)
    [spec] = classification.model_specs
    assert (spec.label_key, spec.prediction_key, spec.example_weight_key) == (
        "species_xf", "probabilities", "lockstep_label_weight")
    # Named, so TFMA does not load each model an extra time to find its type (test_pipeline_e2e:
    # the type TFMA finds in the pushed model when it looks).
    assert spec.model_type == "tf_generic"  # TFMA calls the signatures; it rebuilds no Keras model
    metrics = {m.class_name: m for m in classification.metrics_specs[0].metrics}
    assert {"SparseCategoricalAccuracy", "SparseCategoricalCrossentropy",
            "MultiClassConfusionMatrixPlot"} <= set(metrics)
    metric = metrics["SparseCategoricalAccuracy"]
    assert metric.threshold.value_threshold.lower_bound.value == 0.7
    assert metric.threshold.change_threshold.absolute.value == -0.01
    binary, _ = _gate(CLASSIFICATION, {"no": 6, "yes": 4})
    config = evaluation.eval_config(binary, "y", [], 0.01)
    binarized = config.metrics_specs[1]
    assert list(binarized.binarize.class_ids.values) == [1]
    auc = next(m for m in binarized.metrics if m.class_name == "ExactAUC")
    assert auc.threshold.value_threshold.lower_bound.value == 0.51
    assert auc.threshold.change_threshold.absolute.value == -0.01
    gate, config = _gate(REGRESSION, std=20.0, bounds={"rmse": 12.5})
    regression = evaluation.eval_config(gate, "price", [], config.eval.max_regression)
    assert regression.model_specs[0].prediction_key == "predictions"
    metrics = {m.class_name: m for m in regression.metrics_specs[0].metrics}
    assert metrics["RootMeanSquaredError"].threshold.value_threshold.upper_bound.value == 12.5
    assert metrics["RSquared"].module == "components.metrics"


def test_a_regression_bound_defaults_to_the_label_spread(tmp_path):
    from conftest import cli

    rows = ["x,y"] + [f"{i}.5,{i * 10}" for i in range(200)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", ["", "NA"]))
    assert data.task == REGRESSION
    assert abs(data.label_std - np.std(np.arange(200) * 10.0)) < 1e-6
    result = cli("compile", "--data", tmp_path / "d.csv", "--label", "y",
                 "--output", tmp_path / "p.yaml")
    assert result.returncode == 0, result.stderr
    bound = round(data.label_std * 0.99, 6)  # the mean's RMSE, less the margin
    assert f'upper_bound\\": {bound}\\n' in (tmp_path / "p.yaml").read_text()
    remote = cli("compile", "--data", "gs://b/d", "--label", "y", "--task", "regression",
                 "--output", tmp_path / "q.yaml")
    assert remote.returncode == 2
    assert "eval.bounds.rmse: no naive baseline for rmse was measured" in remote.stderr


def test_eval_slices_keep_the_gate_on_the_whole_eval_split():
    from pipeline import evaluation

    gate, _ = _gate(CLASSIFICATION, {"a": 5, "b": 3, "c": 2}, bounds={"accuracy": 0.8})
    sliced = evaluation.eval_config(gate, "species", ["island", "sex"], 0.01)
    assert [list(s.feature_keys) for s in sliced.slicing_specs] == [[], ["island"], ["sex"]]
    metric = next(m for m in sliced.metrics_specs[0].metrics
                  if m.class_name == "SparseCategoricalAccuracy")
    assert not metric.HasField("threshold")
    [gate] = metric.per_slice_thresholds
    assert [list(s.feature_keys) for s in gate.slicing_specs] == [[]]
    assert gate.threshold.value_threshold.lower_bound.value == 0.8


@pytest.mark.parametrize("values, message", [
    ({"precision": "float8"}, "trainer.precision must be float32, mixed_bfloat16 or mixed_float16"),
    ({"precision": "mixed_float16", "tpu_slice": "v5e-4"},
     "mixed_float16 cannot run on a TPU (TPUStrategy refuses loss scaling); use mixed_bfloat16"),
    ({"precision": "mixed_float16", "strategy": "tpu"}, "mixed_float16 cannot run on a TPU"),
    ({"accumulation_steps": 0}, "trainer.accumulation_steps must be at least 1, got 0"),
    ({"bags": 0}, "trainer.bags must be at least 1, bag_min_rows and bag_rows at least 0; got "
                  "0, 1000 and 5000"),
    ({"bag_rows": -1}, "trainer.bags must be at least 1, bag_min_rows and bag_rows at least 0; "
                       "got 2, 1000 and -1")])
def test_precision_and_accumulation_are_checked(values, message):
    with pytest.raises(TrainerConfigError, match=re.escape(message)):
        trainer_config_from_dict(values)


def test_summary_names_accumulation_precision_and_skipped_steps():
    from pipeline.reporting.summary_text import precision_parts
    from trainer_module.summary import TrainingSummary

    read = TrainingSummary.from_dict
    assert precision_parts(read({"plan": {"accumulation_steps": 1, "precision": "float32"}})) == []
    assert precision_parts(read({
        "plan": {"accumulation_steps": 4, "per_replica_batch": 32, "precision": "mixed_float16"},
        "train": {"skipped_steps": 2, "loss_scale": 8192.0}})) == [
        "4 micro-batches of 32 accumulated per replica",
        "mixed_float16 (loss scaling skipped 2 step(s) on overflow, scale 8192)"]


def test_the_training_summary_round_trips_and_reads_an_older_one():
    import json

    from trainer_module import scaling
    from trainer_module.summary import Asynchronous, TrainingSummary, Verification

    plan = scaling.make_plan(TrainerConfig(train_steps=40), replicas=2)
    summary = TrainingSummary(
        plan, {"loss": 0.5, "skipped_steps": 1}, {"accuracy": 0.9}, "MirroredStrategy", 2,
        train_seconds=3.5, warm_started=True, base_model="/serving/3", model="m:build",
        verify=Verification(2, 3, 32, 64, 0.02, 3e-8, "dense/kernel:0", 1e-2, 1e-4, True),
        asynchronous=Asynchronous(2, 1, 40, 0.7, 3))
    assert TrainingSummary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary
    older = TrainingSummary.from_dict({"strategy": "MirroredStrategy", "replicas": 2,
                                       "plan": {"train_steps": 40, "global_batch": 64},
                                       "a_key_of_another_version": 1})
    assert (older.plan.train_steps, older.plan.global_batch, older.verify, older.train) == (
        40, 64, None, {})
