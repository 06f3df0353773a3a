"""The refit after early stopping (trainer_module/refit.py) on the shared penguins run's real
records: the exported model is the mean of a bag of two fits (trainer_module/bag.py), each from
the start on every train row for the steps the plan says, from seeds 3 and 4, not the first
fit's kept weights; a SIGTERM in the bag's second refit parks its checkpoints, the first
refit's and the first fit's, and the next attempt (a new ModelRun directory, the failed one
removed as TFX removes it, on 2 replicas) resumes the first fit at its stop and the first refit
at its end, resumes the second where it stopped and exports the uninterrupted run's model."""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, eval_examples, penguins_job, python_started
from runtime import termination
from trainer_module import export, refit, reuse, settings, train

pytestmark = pytest.mark.slow

# penguins' 285 train rows are below trainer.bag_min_rows: a bag of two here all the same.
SETTINGS = dict(steps_per_execution=5, checkpoint_every=20, seed=3, bag_min_rows=0)


def _served(serving_dir, records) -> np.ndarray:
    model = tf.saved_model.load(str(serving_dir))
    return model.signatures["serving_default"](examples=tf.constant(records))[
        "probabilities"].numpy()


def export_weights(serving_dir) -> dict:
    """{name: bytes} of the weights a warm start reads from a served model (export.WEIGHTS)."""
    reader = tf.train.load_checkpoint(os.path.join(str(serving_dir), export.WEIGHTS))
    return {name: reader.get_tensor(name).tobytes()
            for name in reader.get_variable_to_shape_map() if "VARIABLE_VALUE" in name}


def _attempt(job, out_dir, *extra) -> tuple[int, str, dict]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "job.json").write_text(job.to_json())
    proc = python_started(REPO / "tests" / "elastic_worker.py", out_dir / "job.json",
                          out_dir / "result.json", *extra)
    out, _ = proc.communicate(timeout=600)
    result = out_dir / "result.json"
    return proc.returncode, out, json.loads(result.read_text()) if result.exists() else {}


def test_the_refit_is_a_fit_on_every_train_row_and_resumes_after_a_sigterm(penguins_run,
                                                                           tmp_path, monkeypatch):
    job = penguins_job(penguins_run, tmp_path / "whole", **SETTINGS)
    records, _ = eval_examples(tf.io.gfile.glob(job.eval_files[0]), "species")
    taken, take = [], reuse.Kept.take

    def counted(kept, *args):
        fitted = take(kept, *args)
        taken.append(fitted is not None)
        return fitted

    monkeypatch.setattr(reuse.Kept, "take", counted)
    whole = train.train_job(job)
    # The refit and the bag's second member train the first fit's model and traced step again,
    # set as built (trainer_module/reuse.py): the fits made alone below are builds of their own.
    assert taken == [False, True, True]
    assert whole.refit and whole.stopping and whole.eval
    fit_rows = whole.stopping.fit_rows
    assert whole.refit.rows == fit_rows + whole.stopping.validation_rows
    assert (whole.refit.steps, whole.refit.decay_steps) == refit.steps(
        whole.stopping, whole.plan, whole.refit.rows, job.trainer.decay_share)
    assert whole.refit.bagged == 2 and whole.refit.seed == 3
    for member in ("lockstep_refit", "lockstep_refit_1"):
        assert (tmp_path / "whole" / "run" / member / "checkpoints").is_dir()
    served = _served(job.serving_model_dir, records)

    # The mean of two fits with no validation rows for those steps, from the start, from seeds
    # 3 and 4: each alone is not the model served.
    alone = []
    for seed in (3, 4):
        direct = dataclasses.replace(
            refit.job(job, whole.plan, whole.stopping, whole.refit.rows),
            model_run_dir=str(tmp_path / f"direct{seed}" / "run"),
            serving_model_dir=str(tmp_path / f"direct{seed}" / "serving"))
        direct = direct.with_trainer(dataclasses.replace(direct.trainer, seed=seed))
        fitted = train.train_job(direct)
        assert fitted.refit is None and fitted.stopping is None
        assert fitted.plan.train_steps == whole.refit.steps
        assert fitted.plan.global_batch == whole.plan.global_batch
        alone.append(_served(direct.serving_model_dir, records))
        assert np.abs(alone[-1] - served).max() > 1e-4
    np.testing.assert_allclose(np.mean(alone, axis=0), served, atol=1e-6)
    # The weights a warm start copies are the first member's.
    assert export_weights(job.serving_model_dir) == export_weights(
        tmp_path / "direct3" / "serving")
    # Not the first fit's kept weights: those are what trainer.refit_rows = 0 exports.
    first = penguins_job(penguins_run, tmp_path / "first", refit_rows=0, **SETTINGS)
    kept = train.train_job(first)
    assert kept.refit is None and kept.stopping == whole.stopping
    assert np.abs(_served(first.serving_model_dir, records) - served).max() > 1e-4

    # A SIGTERM at the second refit's step 10: its checkpoints parked beside the ModelRun
    # directories.
    runs = tmp_path / "cut" / "model_run"
    cut = dataclasses.replace(penguins_job(penguins_run, tmp_path / "cut", **SETTINGS),
                              model_run_dir=str(runs / "1"))
    status, out, stopped = _attempt(cut, tmp_path / "cut" / "a1", "--sigterm-at", "10",
                                    "--in-fit", "2")
    assert status == termination.PREEMPTED_STATUS, out[-3000:]
    # The signal lands after step 10's actions: the next chunk's end, 15, is where it saves.
    assert stopped["step"] == 15, stopped
    parked = list((runs / ".interrupted").glob("*/ckpt-15.index"))
    assert len(parked) == 1, list(runs.rglob("*"))
    # The first fit's checkpoint and the first refit's are parked with it: the next attempt
    # resumes them at their ends.
    assert len(list((runs / ".interrupted").glob(f"*/ckpt-{whole.stopping.stopped_at}.index"))) == 1
    assert len(list((runs / ".interrupted").glob(f"*/ckpt-{whole.refit.steps}.index"))) == 1
    shutil.rmtree(runs / "1")  # TFX's launcher removes a failed execution's outputs
    # On 2 replicas: the automatic batch would be 2 x 32, but the first fit resumes at its stop
    # with the global batch it recorded, trains no further, and its refit is the same job.
    again = dataclasses.replace(cut, model_run_dir=str(runs / "2")).with_trainer(
        dataclasses.replace(cut.trainer, emulate_replicas=2))
    status, out, result = _attempt(again, tmp_path / "cut" / "a2")
    assert status == 0, out[-3000:]
    assert result["resumed_at"] == whole.stopping.stopped_at and result["replicas"] == 2
    assert result["stopping"]["validation_rows"] == whole.stopping.validation_rows
    assert result["plan"]["global_batch"] == whole.plan.global_batch
    assert result["refit"]["resumed_at"] == 15 and result["refit"]["steps"] == whole.refit.steps
    np.testing.assert_allclose(_served(cut.serving_model_dir, records), served, atol=1e-6)
    assert not (runs / ".interrupted").exists() or not any((runs / ".interrupted").iterdir())


def test_a_refit_takes_the_fits_objects_only_where_a_build_of_its_own_trains_the_same():
    """reuse.reusable: not a model of the user's own or one with dropout or column dropout (no
    test holds a reused step with them against a fresh build's), not a loss-scaled optimizer, not asynchronous; and
    Kept.take gives nothing to a plan whose batch, rate or warmup the traced step does not
    hold."""
    model = tf.keras.Sequential([tf.keras.Input([2]), tf.keras.layers.Dense(1)])
    adam = tf.keras.optimizers.Adam()
    cfg = settings.TrainerConfig()
    assert reuse.reusable(cfg, model, adam, asynchronous=False)
    assert not reuse.reusable(cfg, model, adam, asynchronous=True)
    assert not reuse.reusable(dataclasses.replace(cfg, dropout=0.1), model, adam, False)
    assert not reuse.reusable(dataclasses.replace(cfg, column_dropout=0.1), model, adam, False)
    assert not reuse.reusable(dataclasses.replace(cfg, model="my.module:build"), model, adam,
                              False)
    scaled = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
    assert not reuse.reusable(cfg, model, scaled, False)
    plan = dataclasses.make_dataclass("Plan", [
        "global_batch", "per_replica_batch", "accumulation_steps", "replicas", "learning_rate",
        "warmup_steps", "decay_steps", "train_steps"])(64, 64, 1, 1, 0.002, 20, 99, 500)
    kept = reuse.Kept()
    kept.keep(cfg, plan, False, reuse.Fitted(model=model, optimizer=adam, schedule=None,
                                             average=None, metrics={}, steps=None))
    other = dataclasses.replace(plan, warmup_steps=10)
    assert kept.take(other, model, None) is None and kept.fitted is None  # let go either way
