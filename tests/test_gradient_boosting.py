"""The gradient-boosting reference (components/gradient_boosting.py) on small tables laid out as the
ExampleGen's columnar copies are (csv_format.typed_batch: a one-value list per present cell, a null
list per missing one): what it fits, which eval rows it scores, the figures it gives, and the
reason it records where the data allows no figure. In seconds; the real runs' references are
checked in tests/test_pipeline_e2e.py and tests/test_evaluation.py."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

from components import csv_format, generalization
from components import fit_check, gradient_boosting, row_sample
from components.gradient_boosting import MAX_CATEGORIES, Reference, measure

MISSING = csv_format.missing_tokens(["", "NA"])


def _table(columns: dict[str, list], types: dict[str, str]) -> pa.Table:
    """CSV cells (text) as the columnar copy holds them."""
    raw = pa.RecordBatch.from_pydict({k: pa.array([str(v) for v in values], pa.string())
                                      for k, values in columns.items()})
    return pa.Table.from_batches([csv_format.typed_batch(csv_format.clean(raw, MISSING), types)])


def _split(columns: dict[str, list], types: dict[str, str], eval_share: int = 4):
    """(train, eval): every eval_share-th row to eval."""
    rows = len(next(iter(columns.values())))
    to_eval = np.arange(rows) % eval_share == 0
    pick = lambda keep: {k: [v for v, e in zip(values, to_eval) if e == keep]  # noqa: E731
                         for k, values in columns.items()}
    return _table(pick(False), types), _table(pick(True), types)


INT, FLOAT, STRING = csv_format.INT, csv_format.FLOAT, csv_format.STRING


def _binary(rows=800, seed=0):
    """A rarer 'yes' (about 30 %) from a number and a colour; an id that gives the train label
    away (shuffled on the eval side, as a leak that does not hold on new rows)."""
    rng = np.random.default_rng(seed)
    size = rng.normal(0, 1, rows)
    colour = rng.choice(["red", "green", "blue"], rows)
    score = size + (colour == "red") * 1.5
    label = np.where(score > 1.0, "yes", "no")
    label[::13] = "NA"  # unlabeled rows: in no metric
    return {"size": [f"{v:.3f}" for v in size], "colour": list(colour), "label": list(label)}


def test_binary_figures_are_the_evaluators_on_the_labeled_eval_rows():
    columns = _binary()
    types = {"size": FLOAT, "colour": STRING, "label": STRING}
    train, evaluation = _split(columns, types)
    found = measure(train, evaluation, "label", "classification", "auc")
    labels = evaluation.column("label").to_pylist()
    labeled = sum(v is not None for v in labels)
    assert found.eval_rows == labeled < evaluation.num_rows  # the unlabeled rows count nowhere
    assert found.labeled_train_rows == found.train_rows == sum(
        v is not None for v in train.column("label").to_pylist())
    assert not found.sampled and found.not_measured == ""
    assert set(found.metrics) == {"accuracy", "log_loss", "auc"}
    assert found.value == found.metrics["auc"] > 0.95
    # The same figures from the same model's scores, computed as the Evaluator's are, the rarer
    # class positive: refit here alike (LightGBM's defaults, the colour categorical) and compare.
    import lightgbm

    def matrix(table):
        size = np.array([np.nan if v is None else v[0] for v in table.column("size").to_pylist()])
        colour = np.array([{b"blue": 0, b"green": 1, b"red": 2}[v[0]]
                           for v in table.column("colour").to_pylist()], float)
        return np.column_stack([size, colour])

    def truth(table):
        return np.array([-1 if v is None else int(v[0] == b"yes")  # 'yes' is the rarer class
                         for v in table.column("label").to_pylist()])

    y, eval_y = truth(train), truth(evaluation)
    model = lightgbm.LGBMClassifier(random_state=0, n_jobs=1, verbose=-1)
    model.fit(matrix(train)[y >= 0], y[y >= 0], categorical_feature=[1])
    p = model.predict_proba(matrix(evaluation)[eval_y >= 0])
    expected = generalization.metrics({"probabilities": p, "label": eval_y[eval_y >= 0],
                                       "weight": np.ones(labeled)})
    assert found.metrics == pytest.approx(expected, abs=1e-12)
    assert found.words().startswith(f"auc {found.value:.4f} (fit on {found.train_rows:,} "
                                    "train rows in ")
    assert found.library == f"LightGBM {lightgbm.__version__}" == gradient_boosting.library()
    assert found.booster() == f"LightGBM {lightgbm.__version__} (its defaults)"


def test_the_columns_the_run_leaves_out_are_not_fitted():
    columns = _binary(rows=1200)
    rng = np.random.default_rng(1)
    # An id column that is the label on the train side and noise on the eval side.
    columns["case"] = [f"{label}-{i}" if i % 4 else f"{rng.choice(['yes', 'no'])}-{i}"
                       for i, label in enumerate(columns["label"])]
    columns["size"] = [f"{rng.normal():.3f}" for _ in columns["size"]]  # no signal left there
    types = {"size": FLOAT, "colour": STRING, "label": STRING, "case": STRING}
    train, evaluation = _split(columns, types)
    leaky = measure(train, evaluation, "label", "classification", "auc")
    honest = measure(train, evaluation, "label", "classification", "auc", excluded=("case",))
    # The id's codes sort by its text ('no-…' before 'yes-…'), so with it the model fits the
    # train label and scores no better than chance on eval; without it, the colour's signal.
    assert leaky.value < 0.55 and honest.value > 0.7, (honest, leaky)


def test_past_the_row_cap_it_fits_a_sample_and_says_so():
    columns = _binary(rows=2000)
    train, evaluation = _split(columns, {"size": FLOAT, "colour": STRING, "label": STRING})
    found = measure(train, evaluation, "label", "classification", "auc", rows=300)
    assert found.train_rows == 300 < found.labeled_train_rows and found.sampled
    assert f"fit on a sample of 300 of {found.labeled_train_rows:,} train rows" in found.words()
    assert found.value > 0.9
    # The same rows in another order (the ExampleGen's shards differ from run to run): the same
    # sample, the same model (random_state 0), the same figures.
    shuffled = train.take(pa.array(np.random.default_rng(5).permutation(train.num_rows)))
    again = measure(shuffled, evaluation, "label", "classification", "auc", rows=300)
    assert again.metrics == found.metrics, (again, found)
    # Read a file at a time (the component's way: row_sample.sample_files), in files of other
    # sizes and another order: the same sample, the same figures.
    files = [shuffled.slice(start, 450) for start in range(0, shuffled.num_rows, 450)]
    sample, labels = row_sample.sample_files(
        lambda: iter(files[::-1]), "label", lambda cells: np.asarray(cells.is_valid()), 300,
        gradient_boosting._cells)  # noqa: SLF001
    assert sample.num_rows == 300 and len(labels) == train.num_rows
    streamed = measure(sample, evaluation, "label", "classification", "auc", rows=300,
                       labels=labels)
    assert streamed.metrics == found.metrics and streamed.labeled_train_rows == found.labeled_train_rows


def test_multiclass_text_codes_categorical_and_ordinal():
    rng = np.random.default_rng(2)
    rows = 1500
    grade = rng.integers(0, 3, rows)
    # 3 colours (categorical codes) that name the grade 80 % of the time; a 300-valued text
    # column (past MAX_CATEGORIES: ordinal codes, in sorted order) whose order is the grade's.
    colour = np.where(rng.random(rows) < 0.8, np.array(["red", "green", "blue"])[grade], "black")
    code = [f"v{g}{rng.integers(0, 100):03d}" for g in grade]
    assert len(set(code)) > MAX_CATEGORIES
    columns = {"colour": list(colour), "code": code, "grade": [str(g) for g in grade]}
    types = {"colour": STRING, "code": STRING, "grade": INT}
    train, evaluation = _split(columns, types)
    found = measure(train, evaluation, "grade", "classification", "accuracy")
    assert set(found.metrics) == {"accuracy", "log_loss"}
    # The code's order separates the grades (a value unseen in train is missing).
    assert found.value > 0.95, found
    only_colour = measure(train, evaluation, "grade", "classification", "accuracy",
                          excluded=("code",))
    assert 0.75 < only_colour.value < 0.95, only_colour


def test_regression_figures_skip_rows_without_a_label():
    rng = np.random.default_rng(3)
    rows = 1000
    x = rng.normal(0, 1, rows)
    y = 3 * x + rng.normal(0, 0.1, rows)
    label = [f"{v:.4f}" if i % 10 else "" for i, v in enumerate(y)]
    columns = {"x": [f"{v:.4f}" for v in x], "y": label, "empty": [""] * rows}
    train, evaluation = _split(columns, {"x": FLOAT, "y": FLOAT, "empty": FLOAT})
    found = measure(train, evaluation, "y", "regression", "rmse")
    assert set(found.metrics) == {"rmse", "mae", "r2"}
    assert found.eval_rows == sum(v is not None for v in evaluation.column("y").to_pylist())
    assert found.metrics["r2"] > 0.95 and found.value < 0.5  # a column all missing is left out
    assert found.metrics["mae"] <= found.metrics["rmse"]


@pytest.mark.parametrize("columns, types, task, why", [
    ({"x": [str(i) for i in range(300)], "label": ["a"] * 300}, {"x": INT, "label": STRING},
     "classification", "1 class(es) in the train split's labels"),
    ({"x": [""] * 300, "label": ["a", "b", "c"] * 100}, {"x": FLOAT, "label": STRING},
     "classification", "no feature column has a value in the train split"),
    ({"x": [str(i) for i in range(300)], "label": [""] * 300}, {"x": INT, "label": FLOAT},
     "regression", "no labeled train rows"),
    ({"x": [str(i) for i in range(300)], "label": [str(i % 3) if i % 4 else "" for i in range(300)]},
     {"x": INT, "label": INT}, "classification", "no labeled eval rows of a train class"),
])
def test_a_degenerate_table_is_not_measured_and_says_why(columns, types, task, why):
    train, evaluation = _split(columns, types)
    found = measure(train, evaluation, "label", task, "accuracy")
    assert found.metrics == {} and found.value is None
    assert found.not_measured == why
    assert found.words() == f"not measured: {why}"


def test_three_hundred_rows_are_measured():
    columns = _binary(rows=300)
    train, evaluation = _split(columns, {"size": FLOAT, "colour": STRING, "label": STRING})
    found = measure(train, evaluation, "label", "classification", "auc")
    assert found.value is not None and found.value > 0.8 and not found.sampled


def test_the_record_reads_back_and_refuses_unknown_keys():
    found = Reference("rmse", {"rmse": 1.5, "mae": 1.0, "r2": 0.5}, 100, 120, 30, 0.25)
    assert Reference.from_dict(found.to_dict()) == found
    assert found.sampled and found.value == 1.5
    with pytest.raises(ValueError, match="expected the keys"):
        Reference.from_dict({**found.to_dict(), "extra": 1})


def test_a_fit_whose_train_loss_rose_is_not_measured_and_says_where():
    """A boosted fit that diverged (openintro's loans, 7 grades: LightGBM's train log-loss fell
    to 0.07 by tree 22, then rose to 23.5 by tree 100, eval accuracy 0.34) is no reference: the
    record says so with the figures, and holds no metric a gate or a reader could take."""
    losses = np.concatenate([np.linspace(1.1, 0.07, 22), np.linspace(0.5, 23.5, 78)])
    y = np.arange(700) % 7
    why = fit_check.failed(losses, y, regression=False)
    assert why == ("diverged: its train log-loss fell to 0.07 at tree 22, then rose to 23.5 at "
                   "tree 100")
    # A sound fit's train loss falls (small wobbles are no divergence), and ends below the
    # naive baseline's.
    falling = np.linspace(1.0, 0.05, 100)
    assert fit_check.failed(falling, y, regression=False) == ""
    wobble = falling.copy()
    wobble[-1] = wobble[-2] + 0.005
    assert fit_check.failed(wobble, y, regression=False) == ""
    assert "became nan" in fit_check.failed(
        np.array([1.0, np.nan]), y, regression=False)


def test_a_diverged_fit_on_a_table_is_recorded_not_measured(monkeypatch):
    columns = _binary()
    train, evaluation = _split(columns, {"size": FLOAT, "colour": STRING, "label": STRING})
    sound = measure(train, evaluation, "label", "classification", "auc")
    fit = gradient_boosting._fit  # noqa: SLF001

    def diverging(*args):
        model, losses, seconds = fit(*args)
        return model, np.concatenate([losses[:10], np.full(10, 5.0)]), seconds

    monkeypatch.setattr(gradient_boosting, "_fit", diverging)
    found = measure(train, evaluation, "label", "classification", "auc")
    assert sound.value > 0.9 and found.metrics == {} and found.value is None
    assert found.not_measured.startswith(f"{gradient_boosting.library()}'s default fit diverged: "
                                         "its train log-loss fell to ")
    assert found.words() == f"not measured: {found.not_measured}"


def test_a_fit_no_better_than_the_naive_baseline_on_its_train_rows_is_not_measured():
    """A regression whose one feature is constant: the booster cannot split, predicts the train
    mean, and its train l2 is the naive one's: no figure of its own to set beside the model's."""
    rng = np.random.default_rng(4)
    rows = 600
    columns = {"x": ["1.0"] * rows, "y": [f"{v:.4f}" for v in rng.normal(10, 2, rows)]}
    train, evaluation = _split(columns, {"x": FLOAT, "y": FLOAT})
    found = measure(train, evaluation, "y", "regression", "rmse")
    assert found.metrics == {} and found.library == gradient_boosting.library()
    assert re.fullmatch(rf"{re.escape(gradient_boosting.library())}'s default fit is no better "
                        r"than the naive baseline on its train rows: train l2 [\d.]+, the "
                        r"naive [\d.]+", found.not_measured), found.not_measured
