"""The generalisation line: the train sample's figure beside the eval split's, named when they part
either way (components/generalization.py, pipeline/reporting/run_report.py). The figures are the
Chicago taxi trips' (tfx's example data, label `tips`): two trips with tips near 40 fell on the
train side and the eval split's RMSE, 0.82, promised more than any other sample of the rows gives
(1.12 on 10,000 random rows of the whole table)."""

from __future__ import annotations

import pytest

from components import generalization
from pipeline import evaluation
from pipeline.reporting.run_report import RunReport


def _figures(train: float, evaluation_figure: float, metric: str) -> dict:
    return {"train": {"rows": 10000, "metrics": {metric: train}},
            "eval": {"rows": 2985, "metrics": {metric: evaluation_figure}}}


def _line(train: float, evaluation_figure: float, metric: str) -> str:
    task = "regression" if metric == "rmse" else "classification"
    report = RunReport(nodes=[], metrics={}, blessed=True, pushed_to=None,
                       gate=evaluation.Gate(task, metric, ()),
                       figures=_figures(train, evaluation_figure, metric))
    return report.generalization_line()


@pytest.mark.parametrize("train, evaluation_figure, beyond, optimistic", [
    (1.1158, 0.8229, False, True),   # the taxi trips: eval much better than the train rows
    (0.8229, 1.1158, True, False),   # the train rows much better: overfitting
    (1.00, 1.02, False, False),      # 2 % apart
])
def test_a_gap_either_way_is_named_for_a_lower_is_better_metric(train, evaluation_figure, beyond,
                                                                 optimistic):
    g = generalization.gap(_figures(train, evaluation_figure, "rmse"), "rmse", False, 0.05)
    assert (g["beyond"], g["optimistic"]) == (beyond, optimistic)
    assert g["gap"] == pytest.approx((evaluation_figure - train) / evaluation_figure)


def test_the_summary_says_which_way_the_figures_part():
    assert "gap -0.3559 of the eval figure (BEYOND 0.05 the other way: the eval figure is better " \
        "than the train rows get" in _line(1.1158, 0.8229, "rmse")
    assert "(BEYOND 0.05: the model does better on rows it learned from" in _line(
        0.93, 0.80, "accuracy")
    assert "the other way" in _line(0.80, 0.93, "accuracy")
    assert _line(0.91, 0.90, "accuracy").endswith("gap +0.0100 (within 0.05; eval.max_gap)")
