"""The trainer as users run it: killed and resumed, on two workers (inside the pipeline on 8
emulated replicas: tests/test_beam_portable.py, whose run it shares)."""

import dataclasses
import json
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, penguins_job, python_started
from runtime.processes import free_ports

pytestmark = pytest.mark.slow


def _launch(job, out_dir, *extra, env=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "job.json").write_text(job.to_json())
    return python_started(REPO / "tests" / "train_job.py", out_dir / "job.json",
                          out_dir / "result.json", *extra, env=env)


def _final_weights(run_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run_dir / "checkpoints")))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}


def test_killed_trainer_resumes_to_the_same_weights(penguins_run, tmp_path):
    settings = dict(train_steps=60, checkpoint_every=20, steps_per_execution=5, seed=5)
    whole = _launch(penguins_job(penguins_run, tmp_path / "whole", **settings), tmp_path / "whole")
    interrupted_job = penguins_job(penguins_run, tmp_path / "cut", **settings)
    cut = _launch(interrupted_job, tmp_path / "cut", "--kill-at", "30")
    out, _ = cut.communicate(timeout=600)
    assert cut.returncode == -signal.SIGKILL, out[-2000:]
    assert tf.train.latest_checkpoint(str(tmp_path / "cut" / "run" / "checkpoints")).endswith("-20")
    resumed = _launch(interrupted_job, tmp_path / "cut")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert "Resumed from" in out and "at global step 20" in out
    out, _ = whole.communicate(timeout=600)
    assert whole.returncode == 0, out[-3000:]
    a, b = _final_weights(tmp_path / "whole" / "run"), _final_weights(tmp_path / "cut" / "run")
    assert a.keys() == b.keys() and a
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=1e-6, err_msg=key)


def test_two_workers_train_one_model_and_only_the_chief_exports(penguins_run, tmp_path):
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        (tmp_path / f"tmp{index}").mkdir()
        env = dict(os.environ, TMPDIR=str(tmp_path / f"tmp{index}"), TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        job = dataclasses.replace(penguins_job(
            penguins_run, tmp_path, train_steps=30, steps_per_execution=5, per_replica_batch=16),
            model_run_dir=str(tmp_path / "run"))
        procs.append(_launch(job, tmp_path / f"w{index}", env=env))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    results = [json.loads((tmp_path / f"w{i}" / "result.json").read_text()) for i in range(2)]
    # MultiWorkerMirroredStrategy's class is CollectiveAllReduceStrategy: the summary names it as
    # users know it.
    assert [r["strategy"] for r in results] == ["MultiWorkerMirroredStrategy"] * 2
    assert [r["replicas"] for r in results] == [2, 2]
    assert [r["chief"] for r in results] == [True, False]
    assert results[0]["plan"]["global_batch"] == 32
    assert results[0]["train"]["loss"] == pytest.approx(results[1]["train"]["loss"], rel=1e-6)
    assert (tmp_path / "serving" / "saved_model.pb").is_file()
    # The other worker's checkpoints and export (the collectives need it to write them too) were
    # its own, in a directory it removed: nothing is left in either worker's temporary directory.
    assert [list((tmp_path / f"tmp{i}").glob("lockstep-*")) for i in range(2)] == [[], []]


def test_a_job_reads_its_rows_restore_point_transform_output_and_label_scaling_once(
        penguins_run, tmp_path, monkeypatch):
    """train_job (validation, early stopping, the refit, an eval split, the export) counts the
    train rows, loads the Transform output and reads the label's scaling once each, and hands
    them on; and the Trainer's executor decodes the TrainSpec once for run_fn."""
    import collections
    import types

    import tensorflow_transform as tft
    from tfx.components.trainer.fn_args_utils import FnArgs

    from components import trainer as trainer_component
    from trainer_module import build, export, resume, run_fn, train
    from trainer_module.custom_config import TrainSpec

    calls = collections.Counter()

    def counted(name, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(build, "train_rows", counted("rows", build.train_rows))
    monkeypatch.setattr(resume, "restore_from", counted("restore_from", resume.restore_from))
    monkeypatch.setattr(export, "label_scaling", counted("label_scaling", export.label_scaling))
    monkeypatch.setattr(train, "tft", types.SimpleNamespace(
        TFTransformOutput=counted("transform_output", tft.TFTransformOutput)))
    job = penguins_job(penguins_run, tmp_path, train_steps=40, validation_share=0.2,
                       steps_per_execution=5)
    summary = train.train_job(job)
    assert summary.eval and summary.stopping and (tmp_path / "serving" / "saved_model.pb").exists()
    # The refit on every train row (trainer_module/refit.py) is a job of its own: it looks for
    # its own checkpoints; the rest it is handed.
    assert summary.refit and summary.refit.steps > 0
    assert calls == {"rows": 1, "restore_from": 2, "label_scaling": 1, "transform_output": 1}

    decoded = collections.Counter()
    monkeypatch.setattr(TrainSpec, "from_custom_config", classmethod(
        lambda cls, values, run_parameters=None, decode=TrainSpec.from_custom_config.__func__: (
            decoded.update(["spec"]), decode(cls, values, run_parameters))[1]))
    fn_args = FnArgs(custom_config=job.spec.to_custom_config(), train_files=["x"],
                     transform_graph_path="t", model_run_dir="m", serving_model_dir="s")
    fn_args = trainer_component.Executor().fn_args(fn_args, {"train_steps": 7})
    assert run_fn.job_from_fn_args(fn_args).trainer.train_steps == 7 and decoded["spec"] == 1


def test_a_transform_graph_is_pruned_once_for_each_set_of_inputs(penguins_run, tmp_path):
    """components/compat/tft.py `transforms_pruned_once` (the Trainer's Do): the run's TF1
    transform graph applied three times to the raw spec (the train input, the served model's
    transform of the labels, the label's scaling) and once without the label (the served
    signature) is pruned twice, not four times, and transforms as tf.Transform's own does."""
    import tensorflow_transform as tft

    from components.compat import tft as tft_compat

    job = penguins_job(penguins_run, tmp_path)
    records = [r.numpy() for r in tf.data.TFRecordDataset(
        tf.io.gfile.glob(job.eval_files[0]), compression_type="GZIP").take(16)]

    def applied(output, spec):
        layer = output.transform_features_layer()
        return tf.function(lambda x: layer(tf.io.parse_example(x, spec)))(tf.constant(records))

    def dense(outputs):
        return {k: tf.sparse.to_dense(v).numpy() if isinstance(v, tf.SparseTensor) else v.numpy()
                for k, v in outputs.items()}

    theirs = tft.TFTransformOutput(job.transform_dir)
    raw = theirs.raw_feature_spec()
    serving = {k: v for k, v in raw.items() if k != "species"}
    want, want_served = dense(applied(theirs, raw)), dense(applied(theirs, serving))
    with tft_compat.transforms_pruned_once() as prunes:
        ours = tft.TFTransformOutput(job.transform_dir)
        got = [dense(applied(ours, raw)) for _ in range(3)]
        served = dense(applied(ours, serving))
    assert prunes.count == 2
    for outputs, expected in [*((g, want) for g in got), (served, want_served)]:
        assert sorted(outputs) == sorted(expected)
        for name in expected:
            np.testing.assert_array_equal(outputs[name], expected[name], err_msg=name)
    # Outside the block, tf.Transform's own again: each application prunes.
    assert dense(applied(ours, raw)).keys() == want.keys() and prunes.count == 2
