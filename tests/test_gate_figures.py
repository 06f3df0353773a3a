"""The gate's figures over TFMA's metric classes and the reference: the exact AUC and a log loss
that stays finite (components/metrics.py), and beating gradient boosting by the margin, as the
report says it (the gate's rules: tests/unit/test_gate.py)."""

import pytest

from pipeline import evaluation
from unit.test_gate import _eval


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
