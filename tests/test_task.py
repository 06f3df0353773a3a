"""The task is decided once, from the label column or --task, and reaches Transform, Trainer and
the Evaluator's config; an integer label with thousands of values is a regression end to end."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf
import yaml

from conftest import PipelineRun, cli


def _write(path, label_values, rng):
    rows = ["size,color,weight,label"]
    for value in label_values:
        color = ["red", "green", "blue"][int(value) % 3]
        weight = "" if rng.random() < 0.05 else f"{rng.normal(10, 2):.2f}"
        rows.append(f"{value / 100 + rng.normal(0, 0.1):.3f},{color},{weight},{value}")
    path.write_text("\n".join(rows) + "\n")


def _custom_configs(spec_path):
    spec = next(yaml.safe_load_all(spec_path.read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    constant = lambda node: json.loads(  # noqa: E731
        tasks[node]["inputs"]["parameters"]["custom_config"]["runtimeValue"]["constant"])
    eval_config = json.loads(tasks["Evaluator"]["inputs"]["parameters"]["eval_config"][
        "runtimeValue"]["constant"])
    gated = [m["class_name"] for spec in eval_config["metrics_specs"] for m in spec["metrics"]
             if "threshold" in m]
    return constant("Transform")["task"], constant("Trainer")["task"], gated[0]


@pytest.mark.parametrize("values, flag, expected", [
    (list(range(3)) * 100, None, ("classification", "SparseCategoricalAccuracy")),
    (list(range(3)) * 100, "regression", ("regression", "RootMeanSquaredError")),
    (list(range(1000, 4000, 10)), None, ("regression", "RootMeanSquaredError")),
    (list(range(1000, 4000, 10)), "classification", ("classification", "SparseCategoricalAccuracy")),
])
def test_task_from_the_label_or_the_flag_reaches_every_component(tmp_path, values, flag, expected):
    _write(tmp_path / "d.csv", values, np.random.default_rng(1))
    result = cli("compile", "--data", tmp_path / "d.csv", "--label", "label",
                 "--output", tmp_path / "p.yaml", *(["--task", flag] if flag else []),
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    task, metric = expected
    assert _custom_configs(tmp_path / "p.yaml") == (task, task, metric)


def test_a_regression_on_a_text_label_is_refused(tmp_path):
    result = cli("run", "--task", "regression", "--pipeline-root", tmp_path / "root",
                 cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "label column 'species' holds text, and a regression needs numbers (use --task "
        "classification)")
    assert not (tmp_path / "root").exists()


@pytest.mark.slow
def test_an_integer_label_with_thousands_of_values_is_a_regression_that_serves(tmp_path):
    rng = np.random.default_rng(0)
    prices = rng.integers(100, 5000, size=1500)
    _write(tmp_path / "prices.csv", prices, rng)
    run = PipelineRun(tmp_path)
    result = run.run("--data", tmp_path / "prices.csv", "--label", "label")
    assert result.returncode == 0, result.stderr[-3000:]
    # No bound set: a first model is judged against predicting the mean, and beats it.
    bound = float(np.std(prices))
    gate = re.search(r"a model is blessed with rmse at most ([\d.]+) \(([\d.]+) for always the "
                     r"mean\)", result.stdout)
    assert gate, result.stdout
    shown = float(gate.group(2))
    assert abs(shown - bound) < 0.01 * bound
    assert abs(float(gate.group(1)) - 0.99 * shown) < 0.01 * shown  # less the margin
    rmse = float(re.search(r"root_mean_squared_error ([\d.]+)", result.stdout).group(1))
    assert rmse < bound, (rmse, bound)
    assert "task regression (integer label with" in result.stdout
    assert "Task: regression (integer label with" in result.stdout
    assert "root_mean_squared_error" in result.stdout and "Blessed: yes" in result.stdout
    [version] = run.pushed_versions()
    model = tf.saved_model.load(str(version))
    examples = []
    for size in (10.0, 40.0):
        example = tf.train.Example()
        example.features.feature["size"].float_list.value.append(size)
        example.features.feature["color"].bytes_list.value.append(b"red")
        example.features.feature["weight"].float_list.value.append(10.0)
        examples.append(example.SerializeToString())
    out = model.signatures["serving_default"](examples=tf.constant(examples))
    predictions = out["predictions"].numpy().ravel()
    assert predictions.shape == (2,) and np.all(np.isfinite(predictions))
    assert predictions[1] > predictions[0]  # the price grows with the size
