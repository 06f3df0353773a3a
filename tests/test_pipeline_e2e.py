"""The whole pipeline, for real: LocalDagRunner, real TFRecords, a pushed SavedModel."""

import glob
import json
import re
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import PipelineRun, eval_examples, lockstep

pytestmark = pytest.mark.slow


def _components(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^  (\w+)\s+(executed|cached|failed)\s", stdout, re.M))


def test_pushed_model_serves_raw_examples_accurately(penguins_run):
    assert "Blessed: yes" in penguins_run.first.stdout
    comps = _components(penguins_run.first.stdout)
    assert set(comps.values()) == {"executed"} and len(comps) == 9, penguins_run.first.stdout
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
    accuracy = np.mean([p == l for p, l in zip(predicted, labels)])
    assert accuracy > 0.9, accuracy
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)


def test_second_run_is_cached_and_compares_with_the_first_model(penguins_run):
    first_total = float(re.search(r"^Total: ([\d.]+)s", penguins_run.first.stdout, re.M).group(1))
    tic = time.perf_counter()
    result = penguins_run.run("--config", penguins_run.root / "slices.toml")
    assert result.returncode == 0, result.stderr[-3000:]
    comps = _components(result.stdout)
    for node in ("CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator",
                 "Transform", "Trainer"):
        assert comps[node] == "cached", result.stdout
    # The baseline is looked up anew: the Evaluator now compares against run 1's pushed model.
    assert comps["LatestPushedModel"] == "executed" and comps["Evaluator"] == "executed"
    assert "(baseline diff)" in result.stdout
    second_total = float(re.search(r"^Total: ([\d.]+)s", result.stdout, re.M).group(1))
    assert second_total < first_total, (first_total, second_total, time.perf_counter() - tic)
    # `lockstep runs` lists both, newest first, from ML Metadata.
    listed = lockstep("runs", "--pipeline-root", penguins_run.pipeline_root, "--json")
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
    assert "Eval by slice: island=Biscoe example_count" not in penguins_run.first.stdout
    assert "Eval by slice: island=Biscoe n=" in penguins_run.first.stdout
    text = lockstep("runs", "--pipeline-root", penguins_run.pipeline_root).stdout.splitlines()
    assert len(text) == 2 and "6 cached" in text[0] and "pushed" in text[1], text


def test_a_run_is_quiet_and_logs_to_a_file(penguins_run):
    out, err = penguins_run.first.stdout, penguins_run.first.stderr
    lines = out.strip().splitlines()
    assert len(lines) <= 30, out
    for noise in ("cuda", "absl", "WARNING", "Instructions for updating", "deprecat"):
        assert noise.lower() not in (out + err).lower(), noise
    [log_line] = [l for l in lines if "library logs go to" in l]
    log = log_line.split("library logs go to ")[1].split(" ")[0]
    text = open(log).read()
    assert "Component Trainer is finished." in text and "Unable to register cu" in text
    assert re.search(r"^  Trainer\s+step \d+/\d+  loss", out, re.M), out  # progress, not a TTY


def test_another_csv_with_another_label_and_a_string_feature(tmp_path):
    rng = np.random.default_rng(0)
    rows = ["size,color,weight,grade"]
    for i in range(300):
        grade = int(rng.integers(0, 3))
        color = ["red", "green", "blue"][grade] if rng.random() < 0.9 else "black"
        size = rng.normal(grade * 3.0, 0.5)
        weight = "" if i % 17 == 0 else f"{rng.normal(10 - grade, 1):.2f}"
        rows.append(f"{size:.3f},{color},{weight},{grade}")
    (tmp_path / "grades.csv").write_text("\n".join(rows) + "\n")
    run = PipelineRun(tmp_path)
    result = run.run("--data", tmp_path / "grades.csv", "--label", "grade")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "label 'grade', 3 features; task classification (integer label, 3 classes)" in result.stdout
    assert "Task: classification (integer label, 3 classes)" in result.stdout
    assert "Blessed: yes" in result.stdout
    [version] = run.pushed_versions()
    model = tf.saved_model.load(str(version))
    example = tf.train.Example()
    example.features.feature["size"].float_list.value.append(6.0)
    example.features.feature["color"].bytes_list.value.append(b"blue")
    example.features.feature["weight"].float_list.value.append(8.0)
    out = model.signatures["serving_default"](examples=tf.constant([example.SerializeToString()]))
    assert out["classes"].numpy()[0] == b"2"
