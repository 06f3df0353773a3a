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
import os
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


def _first_evaluation(run: PipelineRun) -> str:
    """The Evaluator's output of the run's first execution (its directory is the execution's
    id): the shared penguins run's root also holds a second run's (tests/test_pipeline_e2e.py),
    which may come first or last."""
    return min(glob.glob(str(run.pipeline_root / "Evaluator" / "evaluation" / "*")),
               key=lambda uri: int(os.path.basename(uri)))


def _reported(run: PipelineRun, stdout: str) -> tuple[dict, dict, dict]:
    """The Evaluator's metrics, the summary's and the report page's."""
    from components import evaluator

    tfma_metrics, _ = evaluator.read_metrics(_first_evaluation(run))
    summary = {k: float(v) for k, v in re.findall(
        r"(\w+) ([-\d.]+)", re.search(r"^Eval metrics: (.*)$", stdout, re.M).group(1))}
    page = re.search(r"^Report: (.*)$", stdout, re.M).group(1)  # this run's page
    assert page.startswith(str(run.pipeline_root / "reports")), page
    text = open(page, encoding="utf-8").read()
    shown = {html.unescape(k): float(v) for k, v in re.findall(
        r"data-metric='([^']+)'>([-\d.]+)<", text)}
    return tfma_metrics, summary, shown


def _reference(run: PipelineRun, label: str, tfma_metrics: dict, stdout: str):
    """The gradient-boosting reference's figures (components/gradient_boosting.py), checked to be
    on the rows the Evaluator scored and fitted on every labeled train row, and its line."""
    from components import gradient_boosting

    [uri] = glob.glob(str(run.pipeline_root / "GradientBoosting" / "reference" / "*"))
    reference = gradient_boosting.read(uri)
    assert reference.eval_rows == tfma_metrics["weighted_example_count"], reference
    train = glob.glob(str(run.pipeline_root / "CsvExampleGen" / "examples" / "*" / "Split-train" / "*"))
    _, labels = eval_examples(train, label)
    assert reference.train_rows == reference.labeled_train_rows == sum(v is not None for v in labels)
    model = tfma_metrics[{"auc": "auc", "rmse": "root_mean_squared_error"}[reference.metric]]
    assert re.search(rf"^Reference: LightGBM [\d.]+ \(its defaults\) on this split: "
                     rf"{reference.metric} "
                     rf"{reference.value:.4f} \(fit on {reference.train_rows:,} train rows in "
                     rf"[\d.]+ s\); this model {model:.4f}$", stdout, re.M), stdout
    return reference


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
    # Gradient boosting on the same split, scored on the rows the Evaluator scored (the unlabeled
    # ones in no figure); it learns the sex from the measurements as the model does.
    reference = _reference(binary_run, "sex", tfma_metrics, out)
    assert set(reference.metrics) == {"auc", "accuracy", "log_loss"} and reference.value > 0.85
    assert f"data-reference-metric='auc'>{reference.value:.4f}<" in source


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
    reference = _reference(regression_run, "body_mass_g", tfma_metrics, regression_run.result.stdout)
    assert set(reference.metrics) == {"rmse", "mae", "r2"} and reference.metrics["r2"] > 0.7


def _evaluate_with_tfma_alone(run: PipelineRun, out, monkeypatch) -> str:
    """The run's Evaluator again, on its own inputs and properties (ML Metadata's), with TFMA's
    per-example metrics instead of the batched ones; returns the evaluation's directory."""
    return _evaluate_again(run, out, monkeypatch)["evaluation"][0].uri


def _evaluate_again(run: PipelineRun, out, monkeypatch, more_inputs=None,
                    more_properties=None) -> dict:
    """The run's Evaluator executor again, on its own inputs and properties (ML Metadata's) and
    these, with TFMA's per-example metrics; returns its output artifacts."""
    import contextlib
    import os

    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.types import standard_artifacts

    from components import evaluator

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = str(run.pipeline_root / "metadata.sqlite")
    store = metadata_store.MetadataStore(connection)
    kinds = {t.id: t.name for t in store.get_execution_types()}
    execution = min((e for e in store.get_executions() if kinds[e.type_id].endswith("Evaluator")),
                    key=lambda e: e.id)  # the first run's, as _first_evaluation
    artifact_types = {t.id: t.name for t in store.get_artifact_types()}
    inputs = {}
    for event in store.get_events_by_execution_ids([execution.id]):
        if event.type == metadata_store_pb2.Event.INPUT:
            [found] = store.get_artifacts_by_id([event.artifact_id])
            artifact = getattr(standard_artifacts, artifact_types[found.type_id])()
            artifact.set_mlmd_artifact(found)
            inputs.setdefault(event.path.steps[0].key, []).append(artifact)
    inputs.update(more_inputs or {})
    properties = {k: v.string_value for k, v in execution.custom_properties.items()
                  if k in ("eval_config", "example_splits")}
    properties.update(more_properties or {})
    outputs = {"evaluation": [standard_artifacts.ModelEvaluation()],
               "blessing": [standard_artifacts.ModelBlessing()]}
    for key, [artifact] in outputs.items():
        artifact.uri = str(out / key)
        os.makedirs(artifact.uri)
    monkeypatch.setattr(evaluator, "_batched_metrics",
                        lambda properties: contextlib.nullcontext())
    evaluator.Executor(BaseBeamExecutor.Context(tmp_dir=str(out / "tmp"), unique_id="x")).Do(
        inputs, outputs, properties)
    return outputs


def _figures(evaluation: str) -> dict:
    """{(slice, metric or plot key, field): number} of an evaluation's metrics and plots."""
    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format

    def numbers(value, path):
        if isinstance(value, dict):
            for key, inner in value.items():
                yield from numbers(inner, f"{path}/{key}")
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                yield from numbers(inner, f"{path}[{index}]")
        else:
            yield path, float(value)

    found = {}
    for loaded, pairs in ((tfma.load_metrics(evaluation), "metric_keys_and_values"),
                          (tfma.load_plots(evaluation), "plot_keys_and_values")):
        for per_slice in loaded:
            for pair in getattr(per_slice, pairs):
                key = (str(per_slice.slice_key), str(pair.key).replace("\n", " "))
                for path, number in numbers(json_format.MessageToDict(pair.value), ""):
                    found[(*key, path)] = number
    return found


@pytest.mark.parametrize("which", ["binary_run", "regression_run", "penguins_run"])
def test_batched_metrics_equal_tfmas_own_per_example_ones(which, request, tmp_path, monkeypatch):
    """The Evaluator computes TFMA's metrics from whole batches (components/batched_metrics.py):
    every metric and plot of every slice equals what TFMA computes example by example on the same
    model and rows, to 1e-6 (binary with unlabeled rows and a calibration plot; regression;
    three classes sliced by island, with a confusion matrix plot)."""
    run = request.getfixturevalue(which)
    batched = _first_evaluation(run)
    mine, tfmas = _figures(batched), _figures(_evaluate_with_tfma_alone(run, tmp_path, monkeypatch))
    assert mine.keys() == tfmas.keys() and len(mine) >= 5  # regression: 5 figures, no plot
    assert {k: (v, tfmas[k]) for k, v in mine.items()
            if not (v == tfmas[k] or abs(v - tfmas[k]) <= 1e-6
                    or (np.isnan(v) and np.isnan(tfmas[k])))} == {}


def test_beat_reference_holds_back_a_model_gradient_boosting_beats(binary_run, tmp_path,
                                                                   monkeypatch):
    """eval.beat_reference: the Evaluator, given the reference and its bound, does not bless a
    model TFMA blessed when gradient boosting's figure on the same split is better by more than
    eval.margin, and says why; within the margin, or not measured, the model stays blessed."""
    import json
    import os

    from tfx.types import standard_artifacts

    from components import evaluator, gradient_boosting

    assert "Blessed: yes" in binary_run.result.stdout
    [uri] = glob.glob(str(binary_run.pipeline_root / "Evaluator" / "evaluation" / "*"))
    model = evaluator.read_metrics(uri)[0]["auc"]

    def reference(name, figure):
        artifact = standard_artifacts.ModelEvaluation()
        artifact.uri = str(tmp_path / name)
        os.makedirs(artifact.uri)
        found = gradient_boosting.Reference("auc", {} if figure is None else {"auc": figure},
                                            280, 280, 60, 0.1, "" if figure else "one class")
        (tmp_path / name / gradient_boosting.REFERENCE_FILE).write_text(
            json.dumps(found.to_dict()))
        return artifact

    bound = evaluator.ReferenceBound("auc", "auc", True, 0.01)
    outputs = _evaluate_again(binary_run, tmp_path / "held", monkeypatch,
                              {evaluator.REFERENCE_KEY: [reference("better", model + 0.02)]},
                              {evaluator.REFERENCE_BOUND_KEY: bound.to_json()})
    blessing = outputs["blessing"][0]
    assert blessing.get_int_custom_property("blessed") == 0
    assert os.listdir(blessing.uri) == ["NOT_BLESSED"]
    assert blessing.get_string_custom_property(evaluator.REFERENCE_FAILURE_KEY) == (
        f"auc {model:.4f}, needs at least {model + 0.01:.4f}: gradient boosting's "
        f"{model + 0.02:.4f} on this split, eval.margin 0.01 (eval.beat_reference)")
    # The same evaluation, a blessing TFMA gave: within the margin, or no figure, it stays.
    for name, figure in (("close", model + 0.005), ("unmeasured", None)):
        kept = standard_artifacts.ModelBlessing()
        kept.uri = str(tmp_path / f"blessing-{name}")
        os.makedirs(kept.uri)
        (tmp_path / f"blessing-{name}" / "BLESSED").write_text("")
        kept.set_int_custom_property("blessed", 1)
        assert evaluator.hold_to_reference(kept, bound, reference(name, figure).uri,
                                           outputs["evaluation"][0].uri) == ""
        assert kept.get_int_custom_property("blessed") == 1
        assert os.listdir(kept.uri) == ["BLESSED"]
