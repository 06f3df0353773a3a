"""The numbers the pipeline reports are the served model's: for a binary, a multi-class and a
regression label, each metric computed here from the pushed model's serving signature on the
eval split's raw examples equals the Evaluator's figure, the run summary's and the report's.

The binary run is the bundled penguins with `sex` as the label, some labels blanked (an unlabeled
example counts in no metric), a row number and a date column added (the row number is left out
as an id, the date parsed into parts, and the served model still takes the raw columns).
"""

import csv
import glob
import html
import re

import numpy as np
import pytest
import tensorflow as tf

from conftest import PipelineRun, REPO, eval_examples

pytestmark = pytest.mark.slow


def _served(run: PipelineRun, label: str):
    """(outputs of the pushed model's serving_default, labels) on the eval split, raw examples."""
    [version] = run.pushed_versions()
    files = glob.glob(str(run.pipeline_root / "CsvExampleGen" / "examples" / "*" / "Split-eval" / "*"))
    serialized, labels = eval_examples(files, label)
    model = tf.saved_model.load(str(version))
    return model.signatures["serving_default"](examples=tf.constant(serialized)), labels


def _reported(run: PipelineRun, stdout: str) -> tuple[dict, dict, dict]:
    """The Evaluator's metrics, the summary's and the report page's."""
    from components import evaluator

    [uri] = glob.glob(str(run.pipeline_root / "Evaluator" / "evaluation" / "*"))
    tfma_metrics, _ = evaluator.read_metrics(uri)
    summary = {k: float(v) for k, v in re.findall(
        r"(\w+) ([-\d.]+)", re.search(r"^Eval metrics: (.*)$", stdout, re.M).group(1))}
    [page] = glob.glob(str(run.pipeline_root / "reports" / "*.html"))
    text = open(page, encoding="utf-8").read()
    shown = {html.unescape(k): float(v) for k, v in re.findall(
        r"data-metric='([^']+)'>([-\d.]+)<", text)}
    return tfma_metrics, summary, shown


def _agree(name: str, served: float, tfma_metrics, summary, shown, tolerance=1e-5):
    assert tfma_metrics[name] == pytest.approx(served, abs=tolerance), (name, served, tfma_metrics)
    assert summary[name] == pytest.approx(served, abs=1e-4 + tolerance), (name, summary)
    assert shown[name] == pytest.approx(served, abs=1e-4 + tolerance), (name, shown)


def _auc(scores, positive) -> float:
    """The probability that a positive example scores above a negative one (ties: half)."""
    ranks = np.argsort(np.argsort(scores, kind="stable"), kind="stable") + 1.0
    for value in np.unique(scores):  # average ranks of ties
        ties = scores == value
        ranks[ties] = ranks[ties].mean()
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@pytest.fixture(scope="module")
def binary_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("binary")
    rows = list(csv.DictReader(open(REPO / "data" / "penguins" / "penguins.csv")))
    with open(root / "penguins_sex.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["row", *rows[0], "observed"])
        writer.writeheader()
        for i, row in enumerate(rows):
            if i % 9 == 4:
                row["sex"] = "NA"  # unlabeled: in no metric
            day = 1 + (i * 7) % 28
            writer.writerow({"row": i + 1, **row, "observed": f"{row['year']}-0{1 + i % 9}-{day:02d}"})
    run = PipelineRun(root)
    run.result = run.run("--data", root / "penguins_sex.csv", "--label", "sex")
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    return run


def test_binary_metrics_equal_the_served_model(binary_run):
    out = binary_run.result.stdout
    # The columns' roles, said first; the gate against the naive baselines.
    assert re.search(r"columns left out as ids: 'row' \(344 distinct integers over 344 rows", out), out
    assert "columns parsed as timestamps: 'observed'" in out
    assert re.search(r"blessed with auc at least 0.51 \(0.5 for a constant score\); accuracy at "
                     r"least 0.50\d* \(0.50\d* for always 'male'\)", out), out
    outputs, labels = _served(binary_run, "sex")
    labeled = np.array([label not in ("NA", None) for label in labels])
    assert 0 < (~labeled).sum() < 20, "the eval split has unlabeled examples, which count nowhere"
    classes = [c.decode() for c in outputs["classes"].numpy()]
    truth = np.array(labels, dtype=object)[labeled]
    accuracy = float(np.mean(np.array(classes, dtype=object)[labeled] == truth))
    tfma_metrics, summary, shown = _reported(binary_run, out)
    assert tfma_metrics["weighted_example_count"] == labeled.sum()
    _agree("sparse_categorical_accuracy", accuracy, tfma_metrics, summary, shown)
    # AUC, precision and recall of the positive class: index 1 of the label vocabulary.
    positive = re.search(r"positive class '(\w+)'", out).group(1)
    p_positive = outputs["probabilities"].numpy()[:, 1][labeled]
    is_positive = truth == positive
    # Exact, from the ranks; a confident model's scores tie at 0 and 1 in float32, and TFMA's
    # batches may round a score across such a tie: a pair or two.
    pairs = is_positive.sum() * (~is_positive).sum()
    _agree("auc", _auc(p_positive, is_positive), tfma_metrics, summary, shown,
           tolerance=2.0 / pairs)
    predicted = np.array(classes, dtype=object)[labeled] == positive
    _agree("precision", float((predicted & is_positive).sum() / predicted.sum()),
           tfma_metrics, summary, shown)
    _agree("recall", float((predicted & is_positive).sum() / is_positive.sum()),
           tfma_metrics, summary, shown)
    log_loss = -np.mean(np.log(np.clip(np.where(is_positive, p_positive, 1 - p_positive), 1e-7, 1)))
    _agree("binary_crossentropy", float(log_loss), tfma_metrics, summary, shown, tolerance=1e-4)
    assert re.search(r"^  auc [\d.]+ vs 0.5000 for a constant score \(needs at least 0.51\)"
                     r"  <- gating metric$", out, re.M), out
    [page] = glob.glob(str(binary_run.pipeline_root / "reports" / "*.html"))
    source = open(page).read()
    assert f"Calibration (positive class '{positive}')" in source
    assert "data-gate-metric='auc'" in source and "Confusion matrix" not in source


def test_the_binary_report_renders_its_calibration_plot(binary_run, tmp_path):
    from test_report_page import _rendered

    [page] = glob.glob(str(binary_run.pipeline_root / "reports" / "*.html"))
    dom, _ = _rendered(page, tmp_path)
    calibration = dom[dom.index("Calibration (positive class"):]
    assert calibration.index("<svg") < calibration.index("</svg>")
    assert re.search(r'data-gate-metric="auc">[\d.]+<', dom)


def test_multiclass_metrics_equal_the_served_model(penguins_run):
    outputs, labels = _served(penguins_run, "species")
    classes = np.array([c.decode() for c in outputs["classes"].numpy()], dtype=object)
    truth = np.array(labels, dtype=object)
    tfma_metrics, summary, shown = _reported(penguins_run, penguins_run.first.stdout)
    _agree("sparse_categorical_accuracy", float(np.mean(classes == truth)),
           tfma_metrics, summary, shown)
    # The probabilities' columns are the label vocabulary's classes, in its order.
    [vocabulary] = glob.glob(str(penguins_run.pipeline_root / "Transform" / "transform_graph" /
                                 "*" / "transform_fn" / "assets" / "label_vocab"))
    order = {name: i for i, name in enumerate(open(vocabulary).read().split())}
    probabilities = outputs["probabilities"].numpy()
    names = sorted(set(labels))
    picked = probabilities[np.arange(len(truth)), [order[t] for t in truth]]
    _agree("sparse_categorical_crossentropy", float(-np.mean(np.log(np.clip(picked, 1e-7, 1)))),
           tfma_metrics, summary, shown, tolerance=1e-4)
    recall = re.search(r"^  recall by class: (.*)$", penguins_run.first.stdout, re.M).group(1)
    for name in names:
        expected = float(np.mean(classes[truth == name] == name))
        assert float(re.search(rf"{name} ([\d.]+)", recall).group(1)) == pytest.approx(expected, abs=1e-4)
    assert re.search(r"accuracy [\d.]+ vs 0.4419 for always 'Adelie' \(needs at least 0.4519\)",
                     penguins_run.first.stdout), penguins_run.first.stdout


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    run = PipelineRun(tmp_path_factory.mktemp("regression"))
    run.result = run.run("--label", "body_mass_g")
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    return run


def test_regression_metrics_equal_the_served_model(regression_run):
    outputs, labels = _served(regression_run, "body_mass_g")
    labeled = np.array([label is not None for label in labels])
    y = np.array([float(v) for v, keep in zip(labels, labeled) if keep])
    predicted = outputs["predictions"].numpy().reshape(-1)[labeled]
    tfma_metrics, summary, shown = _reported(regression_run, regression_run.result.stdout)
    error = y - predicted
    _agree("root_mean_squared_error", float(np.sqrt(np.mean(error ** 2))), tfma_metrics, summary,
           shown, tolerance=1e-2)
    _agree("mean_absolute_error", float(np.mean(np.abs(error))), tfma_metrics, summary, shown,
           tolerance=1e-2)
    r2 = 1 - np.sum(error ** 2) / np.sum((y - y.mean()) ** 2)
    _agree("r_squared", float(r2), tfma_metrics, summary, shown)
    assert re.search(r"^  rmse [\d.]+ vs [\d.]+ for always the mean \(needs at most [\d.]+\)",
                     regression_run.result.stdout, re.M)
