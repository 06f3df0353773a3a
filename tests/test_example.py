"""examples/wide_deep, as a user runs it: their own wide & deep model (synchronized
BatchNormalization) and their own tf.Transform preprocessing, by dotted path from the config,
end to end with LocalDagRunner (trainer.verify on; tests/test_kfp_local.py runs it under
kfp.local, each task a process of its own; both runs are benchmarks/kfp_local.py's smoke's);
`lockstep verify` on it passes, and the AUC the run reports is the pushed model's on the same
rows."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, eval_examples, lockstep

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "wide_deep"
CONFIG = EXAMPLE / "config.toml"
DATA = EXAMPLE / "data" / "credit_data.csv"
LABEL = "Status"


def _eval_files(pipeline_root):
    files = sorted(pipeline_root.glob("**/CsvExampleGen/examples/*/Split-eval/*"))
    return files or sorted(pipeline_root.glob("**/CsvExampleGen/examples/Split-eval/*"))


@pytest.fixture(scope="session")
def example_run(wide_deep_runs):
    """`lockstep run --config examples/wide_deep/config.toml --data ...` in a fresh interpreter:
    the LocalDagRunner run benchmarks/kfp_local.py's smoke makes beside its kfp-local one
    (tests/conftest.py, `wide_deep_runs`)."""
    return wide_deep_runs.local


def test_the_users_model_and_preprocessing_train_verify_and_push(example_run):
    out = example_run.result.stdout
    assert ("lockstep: your code: transform.preprocessing_fn = wide_deep.preprocessing:"
            "preprocessing_fn; trainer.model = wide_deep.model:build (its signature; its output "
            "once Transform has run)") in out
    assert "Model: wide_deep.model:build, loss built-in (your code)" in out
    verify = re.search(r"^Verify: 2 replicas equal one device on global batch 128 over 3 steps: "
                       r"largest weight difference \S+ \((\S+)\) beside (\S+) moved, (\S+) within "
                       r"1e-04$", out, re.M)
    assert verify and float(verify.group(3)) < 1e-4, out
    assert "Blessed: yes" in out
    [version] = example_run.pushed_versions()
    # The user's features went into the model; the served model takes raw tf.Examples.
    model = tf.keras.models.load_model(str(version), compile=False)
    assert model.name == "wide_deep"
    assert any("_bn" in v.name and "moving_mean" in v.name for v in model.weights)
    # The AUC the run reports is the served model's on the same rows.
    summary = json.loads(next(example_run.pipeline_root.glob(
        "Trainer/model_run/*/training_summary.json")).read_text())
    assert summary["model"] == "wide_deep.model:build" and summary["verify"]["passed"]
    reported = float(re.search(r"^Eval metrics: .*\bauc ([\d.]+)", out, re.M).group(1))
    serialized, labels = eval_examples(_eval_files(example_run.pipeline_root), LABEL)
    served = model.signatures["serving_default"](examples=tf.constant(serialized))
    probabilities = served["probabilities"].numpy()
    classes = [c.decode() for c in served["classes"].numpy()]
    # The columns follow the label vocabulary: "good"'s is the argmax of a row predicted "good".
    column = int(np.argmax(probabilities[classes.index("good")]))
    good = np.array([label == "good" for label in labels])
    auc = tf.keras.metrics.AUC(num_thresholds=10000)
    auc.update_state(good, probabilities[:, column])
    assert abs(float(auc.result()) - reported) < 0.01, (float(auc.result()), reported)


def test_lockstep_verify_passes_the_example_and_reuses_the_runs_transform(example_run):
    """With the run's own optimizer (--optimizer run; the default, plain SGD, in
    tests/test_equivalence.py)."""
    result = lockstep("verify", "--config", CONFIG, "--data", DATA, "--optimizer", "run",
                      "--pipeline-root", example_run.pipeline_root, cwd=example_run.root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"^  Transform\s+cached", result.stdout, re.M), result.stdout
    assert re.search(r"^verify: 2 replicas x batch 64 = global batch 128, 3 AdamW steps",
                     result.stdout, re.M), result.stdout
    assert "within 1e-04: 2 replicas make the update one device makes" in result.stdout
