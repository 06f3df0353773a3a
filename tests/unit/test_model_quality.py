"""benchmarks/model_quality.py's two sides' data: a table's DROPPED columns leave both (the file
lockstep reads keeps every other cell as written, quotes included), and CatBoost gets the text
columns as its categorical features, every value, where HGB and LightGBM get codes."""

import importlib
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def model_quality():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        yield importlib.import_module("model_quality")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_a_dropped_column_leaves_both_sides_and_every_other_cell_is_as_written(model_quality,
                                                                              tmp_path):
    rows = [f'{i},"{i}, a",{"A" if i % 2 else "B"}{i % 5},{i * 1.5:.1f}' for i in range(50)]
    source = tmp_path / "table.csv"
    source.write_text("id,note,sub_grade,rate\n" + "\n".join(rows) + "\n")
    train_csv, test = model_quality.split_table(source, tmp_path / "out", dropped=("sub_grade",))
    lines = train_csv.read_text().splitlines()
    assert lines[0] == "id,note,rate"
    assert "sub_grade" not in test.columns and list(test.columns) == ["id", "note", "rate"]
    expected = {f'{i},"{i}, a",{i * 1.5:.1f}' for i in range(50)}
    assert set(lines[1:]) <= expected  # the note's quotes and comma as written
    assert len(lines) - 1 == 40 and len(test) == 10
    assert set(test["id"]) | {int(line.split(",")[0]) for line in lines[1:]} == set(range(50))
    # Without a dropped column the raw lines are copied as they were.
    plain, _ = model_quality.split_table(source, tmp_path / "plain")
    assert set(plain.read_text().splitlines()[1:]) <= set(rows)


def test_catboost_learns_from_text_it_gets_as_categories(model_quality, monkeypatch):
    import catboost

    given = []
    fit = catboost.CatBoostClassifier.fit

    def recorded(self, x, y, **kwargs):
        given.append((kwargs.get("cat_features"), x["colour"].tolist()))
        return fit(self, x, y, **kwargs)

    monkeypatch.setattr(catboost.CatBoostClassifier, "fit", recorded)
    rng = np.random.default_rng(0)
    colour = rng.choice(["red", "green", "blue", None], size=400)
    frame = pd.DataFrame({"colour": colour, "noise": rng.normal(size=400),
                          "label": np.where(colour == "red", "yes", "no")})
    train, test = frame.iloc[:300], frame.iloc[300:]
    figures = model_quality.boosting(train, test, "label", "classification",
                                     model_quality.BOOSTERS["CatBoost"])
    assert figures["accuracy"] == 1.0 and figures["auc"] == 1.0
    assert figures["seconds"] > 0
    (categorical, cells), = given  # the text itself, a missing cell one more value
    assert categorical == ["colour"]
    assert set(cells) == {"red", "green", "blue", ""}


@pytest.mark.parametrize("booster", ["CatBoost", "LightGBM", "HGB"])
def test_declared_ids_reach_each_booster_as_its_users_declare_them(model_quality, monkeypatch,
                                                                   booster):
    """IDS: an integer column of 300 raters, whose label is the rater's own (a parity no split on
    the integer finds in a few trees): CatBoost gets it as a categorical feature, LightGBM as a
    category column (every value), HGB as the integers it is (over its 255 categories)."""
    model_class = type(model_quality.BOOSTERS[booster]("classification"))
    given = []
    fit = model_class.fit

    def recorded(self, x, y, **kwargs):
        given.append((str(x["rater"].dtype), kwargs.get("cat_features")))
        return fit(self, x, y, **kwargs)

    monkeypatch.setattr(model_class, "fit", recorded)
    rng = np.random.default_rng(0)
    rater = rng.integers(0, 300, size=6000)
    frame = pd.DataFrame({"rater": rater, "noise": rng.normal(size=6000),
                          "label": np.where(rater % 2 == 0, "even", "odd")})
    train, test = frame.iloc[:5000], frame.iloc[5000:]
    figures = model_quality.boosting(train, test, "label", "classification",
                                     model_quality.BOOSTERS[booster], ids=("rater",))
    (dtype, categorical), = given
    expected = {"CatBoost": ("object", ["rater"]), "LightGBM": ("category", None),
                "HGB": ("int64", None)}[booster]
    assert (dtype, categorical) == expected
    if booster != "HGB":  # each rater's own label, learned from its category
        assert figures["accuracy"] > 0.99


def test_seeds_run_lockstep_once_each_on_the_same_split_and_give_the_mean(model_quality,
                                                                        monkeypatch, tmp_path):
    """--seeds: one lockstep run per trainer.seed, each in its own directory, on the one split;
    the figures are their mean (and each seed's kept); without seeds, one run as before."""
    calls = []

    def run(train_csv, label, work, settings):
        calls.append((work, settings))
        return {"wall": 10.0 + len(calls), "trainer": 1.0, "stdout": "", "epochs": ""}

    def score(work, test, label):
        seed = int(work.name.split("-")[1]) if work.name.startswith("seed-") else 7
        return {"auc": 0.5 + seed / 100}

    monkeypatch.setattr(model_quality, "run_lockstep", run)
    monkeypatch.setattr(model_quality, "score_lockstep", score)
    ours, first, each = model_quality.lockstep_side(tmp_path / "train.csv", None, "y", tmp_path,
                                                    ["trainer.epochs=2"], [0, 1, 5])
    assert [(w.name, s) for w, s in calls] == [
        ("seed-0", ["trainer.epochs=2", "trainer.seed=0"]),
        ("seed-1", ["trainer.epochs=2", "trainer.seed=1"]),
        ("seed-5", ["trainer.epochs=2", "trainer.seed=5"])]
    assert ours["auc"] == pytest.approx(0.52) and [f["auc"] for f in each] == [0.5, 0.51, 0.55]
    assert first["wall"] == pytest.approx(12.0)  # the runs' mean
    calls.clear()
    ours, _, each = model_quality.lockstep_side(tmp_path / "train.csv", None, "y", tmp_path,
                                                [], None)
    assert [(w, s) for w, s in calls] == [(tmp_path, [])] and ours == {"auc": 0.5 + 7 / 100}
