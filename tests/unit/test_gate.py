"""The gate: each task's metric must beat its naive baseline from the data by the margin, an
explicit bound wins, and what cannot be measured must be named."""

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


def test_exact_auc_is_the_rank_statistic_with_ties_and_weights():
    import numpy as np

    from components.metrics import exact_auc

    labels = np.array([0, 0, 1, 1, 0, 1, 0.0])
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.8, 0.9, 0.2])
    # Pairs (positive, negative) ordered right: 0.35 > 0.1, 0.2; 0.8 > 0.1, 0.4, 0.2, tie 0.8;
    # 0.9 > all four: (2 + 3.5 + 4) / 12.
    assert exact_auc(labels, scores, np.ones(7)) == pytest.approx(9.5 / 12)
    # A weight of 0 takes an example out; a weight of 2 counts it twice.
    weights = np.array([1, 1, 1, 1, 1, 1, 0.0])
    assert exact_auc(labels, scores, weights) == pytest.approx(
        exact_auc(labels[:6], scores[:6], np.ones(6)))
    doubled = exact_auc(np.r_[labels, 1], np.r_[scores, 0.35], np.ones(8))
    assert exact_auc(labels, scores, np.array([1, 1, 2, 1, 1, 1, 1.0])) == pytest.approx(doubled)


def test_binary_log_loss_is_finite_for_a_certain_right_answer():
    """TFMA's BinaryCrossEntropy gives NaN (0 * log 0) for a probability of exactly 1 on a
    positive; ours clips as Keras does, so the Evaluator's figure is the served model's."""
    import numpy as np

    from components.metrics import log_loss

    labels, probabilities = np.array([1.0, 0.0, 1.0, 0.0]), np.array([1.0, 1.0, 0.5, 0.0])
    losses = log_loss(labels, probabilities)
    assert np.all(np.isfinite(losses))
    assert losses == pytest.approx([0.0, -np.log(1e-7), np.log(2.0), 0.0], abs=1e-6)
    with np.errstate(divide="ignore", invalid="ignore"):  # what TFMA computes
        assert np.isnan(-(labels * np.log(probabilities)
                          + (1 - labels) * np.log(1 - probabilities))[0])


def test_beat_reference_asks_for_the_reference_figure_less_the_margin():
    from components import gradient_boosting
    from pipeline.reporting import run_report

    gate = evaluation.decide(_eval(beat_reference=True, margin=0.05), "regression",
                             label_std=10.0)
    assert gate.beat_reference and evaluation.Gate.from_dict(gate.to_dict()) == gate
    assert gate.reference_words() == ("rmse no worse than gradient boosting's on the same split "
                                      "by more than 0.05 of it (eval.beat_reference)")
    assert not evaluation.decide(_eval(), "regression", label_std=10.0).beat_reference
    bound = evaluation.reference_bound(gate)  # rmse: the margin is a share, as for the naive bound
    reference = gradient_boosting.Reference("rmse", {"rmse": 4.0}, 100, 100, 25, 0.1)
    assert bound.needed(4.0) == pytest.approx(4.2)
    assert bound.failure(4.19, reference) == ""
    assert bound.failure(4.21, reference) == (
        "rmse 4.2100, needs at most 4.2000: gradient boosting's 4.0000 on this split, "
        "eval.margin 0.05 of it (eval.beat_reference)")
    unmeasured = gradient_boosting.Reference("rmse", {}, not_measured="no labeled train rows")
    assert bound.failure(99.0, unmeasured) == ""  # it informs; nothing to beat
    auc = evaluation.reference_bound(evaluation.decide(
        _eval(beat_reference=True), "classification", {"no": 6, "yes": 4}))
    assert (auc.tfma_name, auc.higher_is_better, auc.needed(0.9)) == ("auc", True, 0.89)
    # The report says why the model was held back, and the reference beside it.
    blessing = run_report.Output("blessing", "", {"blessed": 0, "reference_failure": "why"})
    report = run_report.build([], {"Evaluator": [blessing]})
    assert report.blessed is False and report.failures == ["why"]
    assert "Blessed: no: why" in report.describe()
    report.gate, report.reference, report.metrics = gate, reference, {"root_mean_squared_error": 4.21}
    assert report.reference_line() == (
        "Reference: gradient boosting on this split: rmse 4.0000 (fit on 100 train rows in 0.1 s); "
        "this model 4.2100 (the gate: eval.beat_reference)")
