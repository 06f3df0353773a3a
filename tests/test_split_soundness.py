"""The number a run reports is what users of the served model get, on tables of many repeated
rows (low-cardinality columns, a noisy label): the kind whose content-hash split (TFX's rule, the
label among the hashed cells) put every copy of (x, 'yes') on one side and every copy of (x, 'no')
on the other, so that the model learned a wrong answer and the eval split scored it wrongly.

For a binary, a multi-class and a numeric label, one run each: the Evaluator's gating figure
equals the served model's on a random sample of ALL rows (both splits) within sampling error,
scored here with scikit-learn; the model's train-sample and eval figures agree (the gap the
summary shows); the binary model's log loss is below the constant baseline's. The split rule is
said first and recorded; a group split keeps each group on one side; the label is never a key.
"""

import csv
import glob
import json
import re

import numpy as np
import pytest
import tensorflow as tf
from sklearn import metrics as sk

from conftest import PipelineRun, cli

pytestmark = pytest.mark.slow

ROWS = 10_000
SAMPLE = 4000
TOLERANCE = 0.03
SDS = 3.0  # "within sampling error": three standard errors of the difference


def _se_share(p: float, n: int) -> float:
    return float(np.sqrt(p * (1 - p) / n))


def _se_auc(auc: float, positives: int, negatives: int) -> float:
    """Hanley and McNeil's standard error of an AUC."""
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    return float(np.sqrt((auc * (1 - auc) + (positives - 1) * (q1 - auc * auc)
                          + (negatives - 1) * (q2 - auc * auc)) / (positives * negatives)))


def _table(path, kind: str, seed: int = 7) -> None:
    """ROWS rows of 100 stores and 5 regions (500 distinct feature rows, about 20 copies each)
    and a noisy label that depends on the store: (features, label) pairs repeat a dozen times or
    more, and a model can learn each store's answer."""
    rng = np.random.default_rng(seed)
    effect = rng.normal(0, 1.0, 100)
    store = rng.integers(0, 100, ROWS)
    region = rng.choice(["north", "south", "east", "west", "centre"], ROWS)
    signal = effect[store]
    if kind == "binary":
        label = np.where(rng.random(ROWS) < 1 / (1 + np.exp(-signal)), "yes", "no")
    elif kind == "multiclass":
        logits = np.stack([signal, -signal, np.zeros(ROWS)], axis=1)
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        label = np.array(["low", "high", "mid"])[(rng.random(ROWS)[:, None] > p.cumsum(axis=1)).sum(axis=1)]
    else:
        label = np.round(10 + 3 * signal + rng.normal(0, 2, ROWS)).astype(int)
    columns = {"store": [f"s{i}" for i in store], "region": region}
    if kind == "numeric":  # who bought, for a group split: no bearing on the label
        columns["user"] = [f"u{u}" for u in rng.integers(0, 2000, ROWS)]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*columns, "label"])
        writer.writerows(zip(*columns.values(), label))
    distinct = len(set(zip(store, region, label)))
    assert distinct < ROWS / (2 if kind == "numeric" else 5)  # (features, label) pairs repeated


@pytest.fixture(scope="module", params=["binary", "multiclass", "numeric"])
def run(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    _table(root / "table.csv", request.param)
    run = PipelineRun(root)
    extra = []
    extra = []
    if request.param == "numeric":  # a group split by user, an id out of the model
        (root / "c.toml").write_text('[data]\nsplit_by = ["user"]\ntask = "regression"\n'
                                     'columns = {user = "id"}\n')
        extra = ["--config", root / "c.toml"]
    run.result = run.run("--data", root / "table.csv", "--label", "label", *extra)
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    run.kind = request.param
    return run


def _all_rows(run: PipelineRun):
    """(serialized raw tf.Examples, labels as text) of a random sample of every row, both splits."""
    files = sorted(f for split in ("train", "eval") for f in glob.glob(
        str(run.pipeline_root / "CsvExampleGen" / "examples" / "*" / f"Split-{split}" / "*")))
    records = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    assert len(records) == ROWS
    chosen = np.random.default_rng(11).choice(len(records), SAMPLE, replace=False)
    serialized, labels = [], []
    for i in chosen:
        example = tf.train.Example.FromString(records[i])
        value = example.features.feature["label"]
        kind = value.WhichOneof("kind")
        labels.append(getattr(value, kind).value[0])
        serialized.append(records[i])
    return serialized, labels


def _reported(run: PipelineRun) -> dict:
    from components import evaluator

    [uri] = glob.glob(str(run.pipeline_root / "Evaluator" / "evaluation" / "*"))
    return evaluator.read_metrics(uri)[0]


def test_the_reported_figure_holds_on_a_random_sample_of_all_rows(run):
    [version] = run.pushed_versions() or [None]
    assert version, run.result.stdout  # a sound model on this table is blessed and pushed
    model = tf.saved_model.load(str(version))
    serialized, labels = _all_rows(run)
    out = model.signatures["serving_default"](examples=tf.constant(serialized))
    reported = _reported(run)
    evaluated = int(reported["weighted_example_count"])
    if run.kind == "numeric":
        truth = np.array(labels, dtype=float)
        rmse = float(np.sqrt(sk.mean_squared_error(truth, out["predictions"].numpy().reshape(-1))))
        # RMSE is in the label's units (std about 3.6): the same 3 % of it
        assert abs(reported["root_mean_squared_error"] - rmse) < TOLERANCE * truth.std() * 3, \
            (reported, rmse)
        return
    vocabulary = (version / "assets" / "label_vocab").read_text().split()
    truth = np.array([v.decode() for v in labels])
    probabilities = out["probabilities"].numpy()
    predicted = np.array(vocabulary)[probabilities.argmax(axis=1)]
    accuracy = sk.accuracy_score(truth, predicted)
    error = np.hypot(_se_share(accuracy, evaluated), _se_share(accuracy, SAMPLE))
    assert abs(reported["sparse_categorical_accuracy"] - accuracy) < SDS * error, \
        (reported, accuracy, error)
    if run.kind == "binary":
        positive = truth == vocabulary[1]
        auc = sk.roc_auc_score(positive, probabilities[:, 1])
        share = positive.mean()
        error = np.hypot(
            _se_auc(auc, int(evaluated * share), int(evaluated * (1 - share))),
            _se_auc(auc, int(positive.sum()), int((~positive).sum())))
        assert abs(reported["auc"] - auc) < SDS * error, (reported, auc, error)
        # the served model is worth more than a constant score of the positive share
        served_loss = sk.log_loss(positive, probabilities[:, 1])
        constant_loss = sk.log_loss(positive, np.full(len(positive), share))
        assert served_loss < constant_loss - 0.02, (served_loss, constant_loss)


def test_train_and_eval_figures_agree_and_the_summary_says_so(run):
    out = run.result.stdout
    line = re.search(r"^Generalisation: (\w+) ([\d.]+) on (\d+) train rows vs ([\d.]+) on (\d+) "
                     r"eval rows, gap ([-+][\d.]+).*$", out, re.M)
    assert line, out
    metric, train, evaluation = line.group(1), float(line.group(2)), float(line.group(4))
    rows = int(line.group(3)), int(line.group(5))
    assert metric == {"binary": "auc", "multiclass": "accuracy", "numeric": "rmse"}[run.kind]
    if metric == "rmse":
        assert abs(train - evaluation) / evaluation < 0.1, line.group(0)
    else:  # the same figure on two samples: equal within their sampling error
        error = np.hypot(_se_share(evaluation, rows[0]), _se_share(evaluation, rows[1]))
        assert abs(train - evaluation) < max(TOLERANCE, SDS * 1.5 * error), (line.group(0), error)
    assert "(within 0.05; eval.max_gap)" in line.group(0), line.group(0)
    # The eval figure the gap compares is the Evaluator's own, computed another way.
    reported = _reported(run)
    name = {"auc": "auc", "accuracy": "sparse_categorical_accuracy",
            "rmse": "root_mean_squared_error"}[metric]
    assert evaluation == pytest.approx(reported[name], abs=1e-3 * max(1.0, reported[name]))


def test_the_split_rule_is_said_first_and_recorded(run):
    out = run.result.stdout
    words = ("by groups of user" if run.kind == "numeric" else "by row position")
    lines = out.splitlines()
    said = [i for i, x in enumerate(lines) if x.startswith(f"lockstep: split {words} (never by the label), seed 0")]
    assert said and said[0] < 6, out
    # The check before the run split the rows as the ExampleGen did: the same counts.
    counted = re.search(r": train (\d+) rows, eval (\d+) rows$", lines[said[0]])
    for split, rows in zip(("train", "eval"), counted.groups()):
        [written] = run.pipeline_root.glob(f"CsvExampleGen/examples/*/Split-{split}.rows")
        assert int(written.read_text()) == int(rows), (split, rows)
    assert re.search(r"^lockstep: skew between train and eval: no column past both bounds "
                     r"\(data.max_skew 0.1 and 4x what a random split of these sizes gives\); "
                     r"largest label ", out, re.M), out
    assert f"Split: {words} (never by the label), seed 0, train 4 : eval 1 buckets" in out
    rows = json.loads(cli("runs", "--json", "--pipeline-root", run.pipeline_root).stdout)
    assert rows[0]["split"]["rule"]["kind"] == ("group" if run.kind == "numeric" else "position")
    assert rows[0]["generalization"]["metric"]
    [page] = glob.glob(str(run.pipeline_root / "reports" / "*.html"))
    source = open(page).read()
    assert "data-split>" in source and "data-skew='label'" in source
    assert "data-generalization=" in source


@pytest.mark.parametrize("run", ["numeric"], indirect=True)  # the run that splits by user
def test_a_group_split_keeps_each_group_on_one_side(run):
    sides = {}
    for split in ("train", "eval"):
        files = glob.glob(str(run.pipeline_root / "CsvExampleGen" / "examples" / "*" / f"Split-{split}" / "*"))
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
            user = tf.train.Example.FromString(record.numpy()).features.feature["user"].bytes_list.value[0]
            sides.setdefault(user, set()).add(split)
    assert len(sides) > 1900 and all(len(s) == 1 for s in sides.values())
    assert 0.17 < np.mean([s == {"eval"} for s in sides.values()]) < 0.23


def test_the_label_is_never_a_split_key_and_a_skewed_split_stops_the_run(tmp_path):
    import pyarrow as pa

    from components import row_split

    _table(tmp_path / "table.csv", "binary")
    config = tmp_path / "c.toml"
    config.write_text('[data]\nsplit_by = ["label"]\n')
    result = cli("run", "--config", config, "--data", tmp_path / "table.csv", "--label",
                 "label", "--pipeline-root", tmp_path / "root", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "data.split_by: the label 'label' can never decide the split (a row's split must not "
        "depend on its answer)"), result.stderr
    # Five batches whose labels differ (yes in 10 % of batch b0's rows ... 90 % of b4's), split
    # by batch with a seed that sends b0 alone to eval: the eval side's label shares are far from
    # train's, and the run stops before anything runs, naming the label and the figure.
    rng = np.random.default_rng(3)
    batch = rng.integers(0, 5, 4000)
    label = np.where(rng.random(4000) < 0.1 + 0.2 * batch, "yes", "no")
    with open(tmp_path / "batches.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("batch", "x", "label")] + list(zip(
            [f"b{b}" for b in batch], np.round(rng.normal(size=4000), 3), label)))
    names = pa.RecordBatch.from_arrays([pa.array([f"b{b}" for b in range(5)])], ["batch"])
    seed = next(s for s in range(100) if list(row_split.SplitRule(
        (4, 1), ("batch",), s).assign(names, "batches.csv", 0, 0)) == [1, 0, 0, 0, 0])
    config.write_text(f'[data]\nsplit_by = ["batch"]\nsplit_seed = {seed}\n')
    result = cli("run", "--config", config, "--data", tmp_path / "batches.csv", "--label",
                 "label", "--pipeline-root", tmp_path / "root", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.search(r"the train and eval rows differ past both bounds \(data.max_skew 0.1 and 4x "
                     r"what a random split of these sizes gives\): label \(L-inf 0\.\d+ at "
                     r"'(yes|no)'; past 0.1 and 4x the 0\.0\d+ a random split gives\)", last), last
    # The advice fits a split that already has data.split_by.
    assert "data.split_by is ['batch']: too few groups" in last and "set data.split_by" not in last
    assert not (tmp_path / "root" / "CsvExampleGen").exists()
