"""The whole pipeline, for real: the local runner (TFX's launcher, two lanes), real TFRecords, a
pushed SavedModel."""

import glob
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, PipelineRun, cli, eval_examples, lockstep

pytestmark = pytest.mark.slow


def _components(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^  (\w+)\s+(executed|cached|failed)\s", stdout, re.M))


def _log(stdout: str) -> str:
    """The library log of the run that printed `stdout` (its file named on stdout)."""
    return Path(re.search(r"^lockstep: library logs go to (\S+) ", stdout, re.M).group(1)).read_text()


def test_pushed_model_serves_raw_examples_accurately(penguins_run):
    assert "Blessed: yes" in penguins_run.first.stdout
    # The strategy as users know it (TensorFlow's default strategy is "one device").
    assert "\nTrainer: one device on 1 replica(s), 400 steps of global batch 32 " in \
        penguins_run.first.stdout
    comps = _components(penguins_run.first.stdout)
    assert set(comps.values()) == {"executed"} and len(comps) == 10, penguins_run.first.stdout
    [version] = penguins_run.pushed_versions()
    model = tf.saved_model.load(str(version))
    assert {"serving_default", "transform_features"} <= set(model.signatures)
    serialized, labels = eval_examples(glob.glob(str(
        penguins_run.pipeline_root / "CsvExampleGen" / "examples" / "*" / "Split-eval" / "*")),
        "species")
    assert len(serialized) > 40
    out = model.signatures["serving_default"](examples=tf.constant(serialized))
    predicted = [c.decode() for c in out["classes"].numpy()]
    assert set(predicted) <= {"Adelie", "Chinstrap", "Gentoo"}
    accuracy = np.mean([p == x for p, x in zip(predicted, labels)])
    assert accuracy > 0.9, accuracy
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    # The Evaluator ran the serving check on this very content, and the Pusher relied on it.
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    from components import serving_check, serving_versions

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = str(penguins_run.pipeline_root / "metadata.sqlite")
    [blessing] = metadata_store.MetadataStore(connection).get_artifacts_by_type("ModelBlessing")
    props = blessing.custom_properties
    assert props[serving_check.VERDICT_KEY].string_value == serving_check.PASSED
    assert props[serving_check.CHECKED_SHA_KEY].string_value == serving_versions.content_hash(str(version))
    # Still a Keras SavedModel (saved without each layer's traces), which Keras rebuilds from its
    # config once lockstep's layers are registered (importing trainer_module.model); TFMA is
    # told tf_generic and calls its signatures, as a model server does.
    from tensorflow_model_analysis.utils import model_util

    import trainer_module.model  # noqa: F401  registers NumericEmbedding and EnsembleHead

    assert model_util.get_model_type(None, str(version)) == "tf_keras"
    assert tf.keras.models.load_model(str(version), compile=False).name == "model"
    # The eval split is measured once, by the Evaluator: the Trainer made no pass of its own.
    [summary] = penguins_run.pipeline_root.glob("Trainer/model_run/*/training_summary.json")
    assert json.loads(summary.read_text())["eval"] == {}


def test_second_run_is_cached_and_compares_with_the_first_model(penguins_run):
    first_total = float(re.search(r"^Total: ([\d.]+)s", penguins_run.first.stdout, re.M).group(1))
    tic = time.perf_counter()
    # --wait: with workers, test_parameter_server may be copying the root under its lock.
    result = penguins_run.run("--config", penguins_run.root / "slices.toml", "--wait", "600")
    assert result.returncode == 0, result.stderr[-3000:]
    comps = _components(result.stdout)
    for node in ("CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator",
                 "Transform", "Trainer", "GradientBoosting"):
        assert comps[node] == "cached", result.stdout
    # The baseline is looked up anew: the Evaluator now compares against run 1's pushed model.
    assert comps["LatestPushedModel"] == "executed" and comps["Evaluator"] == "executed"
    assert "(baseline diff)" in result.stdout
    # Each run's second lane and its serving check: the run's process forked once its imports
    # were done, not interpreters importing TFX and TensorFlow again (pipeline/local/
    # node_worker.py, components/serving_check.py); the Evaluator's check, in this run too
    # (its Trainer cached), is the forked process.
    for run in (penguins_run.first, result):
        log = _log(run.stdout)
        assert re.search(r" \[worker\]: Node worker: process \d+, forked from \d+ once its imports "
                         r"were done$", log, re.M)
        forked = re.findall(r"Serving check: process (\d+) forked, waiting for its model$", log,
                            re.M)
        checked = re.findall(r"Serving check of \S+: process (\d+)(.*)$", log, re.M)
        assert len(forked) == 1 and checked == [(forked[0], " (waiting for it)")], (forked, checked)
        assert not re.search(r"Serving check: process \d+ prewarmed", log)  # not spawned
    # The same model, blessed again, is not pushed again: one version, and the summary says so.
    [version] = penguins_run.pushed_versions()
    assert (f"Model not pushed: this model was already pushed as version {version.name}; not "
            "pushed again") in result.stdout, result.stdout
    second_total = float(re.search(r"^Total: ([\d.]+)s", result.stdout, re.M).group(1))
    assert second_total < first_total, (first_total, second_total, time.perf_counter() - tic)
    # `lockstep runs` lists both, newest first, from ML Metadata.
    listed = cli("runs", "--pipeline-root", penguins_run.pipeline_root, "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    runs = json.loads(listed.stdout)
    assert len(runs) == 2 and runs[0]["started"] >= runs[1]["started"]
    assert "Trainer" in runs[0]["cached"] and "Trainer" in runs[1]["executed"]
    assert runs[1]["blessed"] is True and runs[1]["pushed_to"] == str(
        penguins_run.pushed_versions()[0])
    assert runs[0]["data"].endswith("penguins") and runs[0]["metrics"]
    # eval.slices = ["island"]: TFMA's metrics per island, adding up to the whole eval split.
    islands = runs[1]["slice_metrics"]
    assert sorted(islands) == ["island=Biscoe", "island=Dream", "island=Torgersen"], islands
    assert sum(m["example_count"] for m in islands.values()) == runs[1]["metrics"]["example_count"]
    # The gate it ran under, and recall per class from TFMA's confusion matrix.
    assert runs[1]["gate"]["metric"] == "accuracy"
    assert runs[1]["gate"]["bounds"][0]["baseline_words"] == "always 'Adelie'"
    assert set(runs[1]["recall_by_class"]) == {"Adelie", "Gentoo", "Chinstrap"}
    assert "Eval by slice: island=Biscoe example_count" not in penguins_run.first.stdout
    assert "Eval by slice: island=Biscoe n=" in penguins_run.first.stdout
    lines = cli("runs", "--pipeline-root", penguins_run.pipeline_root).stdout.splitlines()
    text = [line for line in lines if not line.startswith("  by slice: ")]  # a run's own line
    assert len(text) == 2 and "7 cached" in text[0] and "pushed" in text[1], lines
    assert len(lines) == 4 and lines[1].startswith("  by slice: island=Biscoe"), lines
    assert "blessed, not pushed (this model was already pushed" in text[0], text


def test_the_gradient_boosting_reference_ran_beside_the_trainer_on_the_same_rows(penguins_run):
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    out = penguins_run.first.stdout
    # The summary: its figure on this split beside the model's, the rows it was fitted on.
    line = re.search(r"^Reference: LightGBM [\d.]+ \(its defaults\) on this split: accuracy "
                     r"([\d.]+) \(fit on "
                     r"(\d+) train rows in [\d.]+ s\); this model ([\d.]+)$", out, re.M)
    assert line, out
    assert re.search(rf"split .*: train {line.group(2)} rows, eval \d+ rows", out)
    model = re.search(r"sparse_categorical_accuracy ([\d.]+)", out).group(1)
    assert line.group(3) == model
    assert float(line.group(1)) > 0.9  # penguins' species: an easy table
    # `lockstep runs --json`: the figures, scored on exactly the rows the Evaluator scored.
    listed = json.loads(cli("runs", "--pipeline-root", penguins_run.pipeline_root,
                            "--json").stdout)
    reference = listed[-1]["reference"]  # the fixture's run, the oldest
    assert reference["eval_rows"] == listed[-1]["metrics"]["example_count"]
    assert f"{reference['value']:.4f}" == line.group(1) and reference["metric"] == "accuracy"
    assert f"{reference['model']:.4f}" == model
    assert reference["train_rows"] == int(line.group(2)) and reference["sampled"] is False
    assert set(reference["metrics"]) == {"accuracy", "log_loss"}
    # The page shows it beside the gate's figure.
    page = re.search(r"^Report: (.*)$", out, re.M).group(1)
    assert f"data-reference-metric='accuracy'>{line.group(1)}<" in open(page).read()
    # It waited for the validator (it fits validated data), and not for the Trainer.
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = str(penguins_run.pipeline_root / "metadata.sqlite")
    store = metadata_store.MetadataStore(connection)
    first_run = min(store.get_contexts_by_type("pipeline_run"),
                    key=lambda c: c.create_time_since_epoch)
    times = {}
    for execution in store.get_executions_by_context(first_run.id):
        [node] = [c.name.split(".", 1)[-1] for c in store.get_contexts_by_execution(execution.id)
                  if c.type == "node"]
        times[node] = (execution.create_time_since_epoch, execution.last_update_time_since_epoch)
    start, _ = times["GradientBoosting"]
    assert start >= times["ExampleValidator"][1]
    if os.cpu_count() > 1:  # the second lane
        assert start < times["Trainer"][1]


def test_two_concurrent_runs_on_one_root_push_once_and_each_reports_its_own(tmp_path):
    from conftest import lockstep_started

    run = PipelineRun(tmp_path)
    args = ["run", "--pipeline-root", run.pipeline_root, "--serving-dir", run.serving_dir]
    first = lockstep_started(*args, cwd=tmp_path)
    while not (run.pipeline_root / "run.lock").exists():
        time.sleep(0.1)
    busy = cli(*args, cwd=tmp_path)  # no waiting: refused at once, status 3 (in this process)
    assert busy.returncode == 3 and "another lockstep run holds" in busy.stderr, busy.stderr
    second = lockstep(*args, "--wait", "600", cwd=tmp_path)  # waits its turn
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0 and second.returncode == 0, (err[-2000:], second.stderr[-2000:])
    [version] = run.pushed_versions()
    assert f"Model pushed to: {version}" in out
    assert "Model not pushed: this model was already pushed as version" in second.stdout
    assert "Trainer              cached" in second.stdout
    listed = json.loads(cli("runs", "--pipeline-root", run.pipeline_root, "--json").stdout)
    assert [r["pushed_to"] for r in listed] == [None, str(version)]
    assert all(not r["unfinished"] for r in listed), listed


def test_a_run_is_quiet_and_logs_to_a_file(penguins_run):
    out, err = penguins_run.first.stdout, penguins_run.first.stderr
    lines = out.strip().splitlines()
    # The Trainer's progress lines come every few seconds (more of them on a slower machine);
    # every other line is a deliberate one (the 34th: what the model saw, `Seen:`; the 35th: the
    # refit on every train row, `Refit:`).
    said = [line for line in lines if not re.match(r"^  Trainer\s+step \d+/", line)]
    assert len(said) <= 35, out
    assert sum(line.startswith("Refit: on all ") for line in said) == 1, out
    for noise in ("cuda", "absl", "WARNING", "Instructions for updating", "deprecat"):
        assert noise.lower() not in (out + err).lower(), noise
    [log_line] = [x for x in lines if "library logs go to" in x]
    log = log_line.split("library logs go to ")[1].split(" ")[0]
    text = open(log).read()
    assert "Component Trainer is finished." in text and "Unable to register cu" in text
    assert re.search(r"^  Trainer\s+step \d+/\d+  loss", out, re.M), out  # progress, not a TTY


def test_transform_reads_with_the_example_gens_schema_the_feature_spec_schemagen_gives(
        penguins_run):
    """Transform need not wait for StatisticsGen and SchemaGen: it reads the records with the
    ExampleGen's types-only schema, whose feature spec is the one SchemaGen's schema gives (so
    the Trainer, which parses with Transform's raw feature spec, reads the same)."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_transform.tf_metadata import schema_utils
    from tfx.utils import io_utils

    def read(pattern):
        [path] = glob.glob(str(penguins_run.pipeline_root / pattern))
        return io_utils.parse_pbtxt_file(path, schema_pb2.Schema())

    types = read("CsvExampleGen/schema/*/schema.pbtxt")
    assert read("Transform/transform_graph/*/metadata/schema.pbtxt") == types
    header = (REPO / "data/penguins/penguins.csv").read_text().splitlines()[0].split(",")
    assert sorted(f.name for f in types.feature) == sorted(header)
    kinds = {f.name: schema_pb2.FeatureType.Name(f.type) for f in types.feature}
    assert kinds["species"] == kinds["island"] == "BYTES" and kinds["bill_length_mm"] == "FLOAT"
    assert kinds["year"] == "INT"
    spec = schema_utils.schema_as_feature_spec(types).feature_spec
    assert spec == schema_utils.schema_as_feature_spec(
        read("SchemaGen/schema/*/schema.pbtxt")).feature_spec
    assert all(isinstance(s, tf.io.VarLenFeature) for s in spec.values())


def test_another_csv_with_another_label_and_a_string_feature(tmp_path):
    rng = np.random.default_rng(0)
    # Column names TensorFlow would refuse as scope names, and a cell over 128 KiB: they work.
    rows = ["size (cm),colour é,weight,grade"]
    for i in range(300):
        grade = int(rng.integers(0, 3))
        color = ["red", "green", "blue"][grade] if rng.random() < 0.9 else "black"
        size = rng.normal(grade * 3.0, 0.5)
        weight = "" if i % 17 == 0 else f"{rng.normal(10 - grade, 1):.2f}"
        if i == 7:
            color = "x" * 200_000
        rows.append(f"{size:.3f},{color},{weight},{grade}")
    (tmp_path / "grades.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    run = PipelineRun(tmp_path)
    result = run.run("--data", tmp_path / "grades.csv", "--label", "grade")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "label 'grade', 3 columns; task classification (integer label, 3 classes)" in result.stdout
    assert "Task: classification (integer label, 3 classes)" in result.stdout
    assert "Blessed: yes" in result.stdout
    [version] = run.pushed_versions()
    model = tf.saved_model.load(str(version))
    example = tf.train.Example()
    example.features.feature["size (cm)"].float_list.value.append(6.0)
    example.features.feature["colour é"].bytes_list.value.append(b"blue")
    example.features.feature["weight"].float_list.value.append(8.0)
    out = model.signatures["serving_default"](examples=tf.constant([example.SerializeToString()]))
    assert out["classes"].numpy()[0] == b"2"
