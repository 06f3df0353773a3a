"""The gate: each task's metric must beat its naive baseline from the data by the margin, an
explicit bound wins, and what cannot be measured must be named (its figures over TFMA's metrics
and the reference: tests/test_gate_figures.py)."""

import math

import pytest

from pipeline import config as config_lib, evaluation


def _eval(**values):
    return config_lib.load(None, {f"eval.{k}": v for k, v in values.items()}).eval


def test_a_binary_label_gates_on_auc_and_never_below_the_majority_class():
    gate = evaluation.decide(_eval(), "classification", {"no": 619, "yes": 381})
    assert gate.metric == "auc" and gate.binary
    auc, accuracy = gate.bounds
    assert (auc.metric, auc.value, auc.baseline_words) == ("auc", 0.51, "a constant score")
    assert (accuracy.metric, accuracy.value, accuracy.baseline) == ("accuracy", 0.619, 0.619)
    assert accuracy.baseline_words == "always 'no'"
    assert gate.tfma_name() == "auc" and gate.tfma_name("log_loss") == "binary_crossentropy"


def test_more_classes_gate_on_accuracy_past_the_majority_share_by_the_margin():
    gate = evaluation.decide(_eval(margin=0.05), "classification", {"a": 50, "b": 30, "c": 20})
    [accuracy] = gate.bounds
    assert (gate.metric, accuracy.value, accuracy.words()) == (
        "accuracy", 0.55, "at least 0.55 (0.5 for always 'a')")


def test_log_loss_is_measured_against_predicting_the_class_shares():
    gate = evaluation.decide(_eval(metric="log_loss"), "classification", {"a": 75, "b": 25})
    entropy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert gate.bounds[0].metric == "log_loss" and not gate.bounds[0].higher_is_better
    assert gate.bounds[0].value == pytest.approx(entropy - 0.01, abs=1e-6)
    assert [b.metric for b in gate.bounds] == ["log_loss", "accuracy", "auc"]


def test_a_regression_must_beat_the_mean_and_an_explicit_bound_wins():
    gate = evaluation.decide(_eval(), "regression", label_std=100.0)
    assert (gate.metric, gate.bounds[0].value) == ("rmse", 99.0)
    explicit = evaluation.decide(_eval(bounds={"rmse": 12.5, "r2": 0.3}), "regression",
                                 label_std=100.0)
    assert [(b.metric, b.value, b.explicit) for b in explicit.bounds] == [
        ("rmse", 12.5, True), ("r2", 0.3, True)]


@pytest.mark.parametrize("values, task, counts, message", [
    ({"metric": "auc"}, "classification", {"a": 1, "b": 1, "c": 1},
     "eval.metric: auc needs a binary label"),
    ({"metric": "rmse"}, "classification", {"a": 1, "b": 1}, "eval.metric: 'rmse' is not a "
                                                             "metric of a classification"),
    ({"bounds": {"accuracy": "high"}}, "classification", {"a": 1, "b": 1},
     "eval.bounds.accuracy must be a number"),
    ({"metric": "mae"}, "regression", None, "eval.bounds.mae: no naive baseline for mae"),
    ({}, "classification", None, "eval.bounds.accuracy: no naive baseline for accuracy was "
                                 "measured (the data is not read before the run)"),
])
def test_what_cannot_be_gated_is_one_line_naming_the_key(values, task, counts, message):
    with pytest.raises(config_lib.ConfigError) as err:
        evaluation.decide(_eval(**values), task, counts, where="d.csv")
    assert str(err.value).startswith(message), str(err.value)


def test_replaced_keys_say_what_replaced_them(tmp_path):
    (tmp_path / "c.toml").write_text("[eval]\nmin_accuracy = 0.8\n")
    with pytest.raises(config_lib.ConfigError, match=r"'eval.min_accuracy' was replaced by "
                                                     r"eval.bounds = \{accuracy = ...\}"):
        config_lib.load(tmp_path / "c.toml")


def test_the_gate_survives_its_record():
    gate = evaluation.decide(_eval(), "classification", {"no": 6, "yes": 4})
    assert evaluation.Gate.from_dict(gate.to_dict()) == gate
