"""Elastic resume: a job checkpointed on N replicas and resumed on M keeps the checkpoint's
global batch (accumulation on fewer replicas, a smaller per-replica batch on more), so its
learning rate, steps, schedule and place in the input are the job's, and it ends with the weights
of an uninterrupted run on N. In process, on the test process's 8 logical CPU devices
(conftest.py), the built-in model and AdamW on the penguins run's own data."""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, penguins_job, python_started
from trainer_module import resume, scaling, strategy as strategy_lib, train
from runtime.processes import free_ports
from trainer_module.summary import TrainingSummary

pytestmark = pytest.mark.slow

# 24 steps, a checkpoint every 8, stopped at 8: the resumed part crosses the warmup's end (20),
# the flat rate and the decay (the last 20 %), and a later checkpoint.
SETTINGS = dict(train_steps=24, checkpoint_every=8, steps_per_execution=4, seed=3,
                validation_share=0.0, warmup_steps=20)
STOP_AT = 8


class _Stopped(Exception):
    pass


def _stop_at(step, logs):  # after the checkpoint at this step is on disk (controller.py)
    if step >= STOP_AT:
        raise _Stopped(step)


@pytest.fixture(autouse=True)
def _replicas_from_the_test_processs_devices(monkeypatch):
    """trainer.emulate_replicas = N takes the first N of the 8 logical devices already there."""
    monkeypatch.setattr(strategy_lib, "configure_emulated_replicas", lambda n: None)


def _job(penguins_run, out_dir, **trainer):
    """penguins_job's, without its eval split: these tests read the weights, not the metrics
    (an evaluation after training is tested where it is: tests/test_evaluation.py)."""
    return dataclasses.replace(penguins_job(penguins_run, out_dir, **trainer), eval_files=[])


def _train(job, **callbacks) -> TrainingSummary:
    return train.train_job(job, **callbacks)


def _weights(job) -> dict:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(resume.checkpoint_dir(job)))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a)


def _elastic_runs(penguins_run, tmp_path, was: int, now: list[int], **trainer):
    """An uninterrupted run on `was` replicas, one stopped at STOP_AT on `was`, and that one
    resumed (a copy of its run directory each) on each of `now`: {replicas: (summary, job)}."""
    settings = {**SETTINGS, **trainer}
    whole = _job(penguins_run, tmp_path / "whole", emulate_replicas=was, **settings)
    uninterrupted = _train(whole)
    cut = _job(penguins_run, tmp_path / "cut", emulate_replicas=was, **settings)
    with pytest.raises(_Stopped):
        _train(cut, callbacks=[_stop_at])
    assert tf.train.latest_checkpoint(resume.checkpoint_dir(cut)).endswith(f"-{STOP_AT}")
    runs = {"stopped": _weights(cut)}  # the weights at STOP_AT
    for replicas in now:
        job = _job(penguins_run, tmp_path / f"on{replicas}", emulate_replicas=replicas,
                   **settings)
        shutil.copytree(cut.model_run_dir, job.model_run_dir)
        runs[replicas] = (_train(job), job)
    return uninterrupted, whole, runs


def test_stopped_on_8_replicas_resumed_on_4_2_and_1_ends_with_the_8_replica_weights(
        penguins_run, tmp_path):
    """Every embedding table split by rows over the replicas (trainer_module/sharded_embedding.py),
    its blocks and slots checkpointed as slices of one table: 8 blocks (a table of fewer rows,
    one a row) read back as 4, 2 and 1 (one device: one block each, the same layers; a whole
    table in the stack there did not restore: a shape mismatch in the kept best weights); the
    dense layers mirrored, as every table is by default
    (the mirrored tables' resume on another replica count: the 2 -> 8 test below, and the
    worker processes' in tests/test_gpu_machines.py)."""
    uninterrupted, whole, runs = _elastic_runs(penguins_run, tmp_path, 8, [4, 2, 1],
                                               shard_embeddings_over=0)
    want = _weights(whole)
    # The tables are in the checkpoint whole, as one tensor each (the blocks' slices).
    assert any("/blocks/.ATTRIBUTES/rows" in key for key in want)
    assert len(uninterrupted.sharded_tables) == 5
    assert all(t.blocks == min(8, t.rows) for t in uninterrupted.sharded_tables)
    moved = _max_difference(runs["stopped"], want)  # from the stop to the end
    plan = uninterrupted.plan
    assert (plan.replicas, plan.per_replica_batch, plan.global_batch) == (8, 32, 256)
    for replicas, accumulation in ((4, 2), (2, 4), (1, 8)):
        summary, job = runs[replicas]
        difference = _max_difference(_weights(job), want)
        print(f"elastic resume 8 -> {replicas} replicas (accumulation {accumulation}), "
              f"{SETTINGS['train_steps']} steps: max abs difference {difference:.1e} against "
              f"the uninterrupted 8-replica run (weights moved {moved:.1e} after the stop)")
        assert difference <= 1e-5 and moved > 1000 * difference
        assert (summary.replicas, summary.plan.per_replica_batch,
                summary.plan.accumulation_steps, summary.plan.global_batch) == (
                    replicas, 32, accumulation, 256)
        # The rate, steps and schedule are the job's.
        for field in ("learning_rate", "train_steps", "warmup_steps", "decay_steps", "examples"):
            assert getattr(summary.plan, field) == getattr(plan, field), field
        assert summary.resumed_at == STOP_AT
        assert summary.resume_words() == (
            f"resumed at step {STOP_AT} on {replicas} replicas (was 8): accumulation "
            f"{accumulation} keeps global batch 256")
        assert TrainingSummary.from_dict(summary.to_dict()).elastic == summary.elastic
        # The checkpoints written since record the topology they were written on.
        assert resume.recorded_topology(resume.checkpoint_dir(job)) == scaling.Topology(
            replicas, 1, 32, accumulation, 256)
    assert uninterrupted.elastic is None


def test_stopped_on_2_replicas_resumed_on_8_takes_a_smaller_per_replica_batch(
        penguins_run, tmp_path):
    """M > N: 2 x 32 becomes 8 x 8, no accumulation; with an L2 penalty on the weights, which
    each replica adds scaled by 1 / (replicas x micro-batches)."""
    uninterrupted, whole, runs = _elastic_runs(penguins_run, tmp_path, 2, [8], l2=0.01)
    summary, job = runs[8]
    difference = _max_difference(_weights(job), _weights(whole))
    moved = _max_difference(runs["stopped"], _weights(whole))
    print(f"elastic resume 2 -> 8 replicas (per-replica batch 32 -> 8), l2: max abs difference "
          f"{difference:.1e} against the uninterrupted 2-replica run (weights moved {moved:.1e} "
          "after the stop)")
    assert difference <= 1e-5 and moved > 1000 * difference
    assert (summary.plan.per_replica_batch, summary.plan.accumulation_steps,
            summary.plan.global_batch) == (8, 1, 64)
    assert summary.resume_words() == (f"resumed at step {STOP_AT} on 8 replicas (was 2): "
                                      "accumulation 1 keeps global batch 64")
    assert summary.plan.learning_rate == uninterrupted.plan.learning_rate


def test_the_split_that_keeps_a_global_batch():
    assert scaling.elastic_split(256, 4, 32) == (32, 2)
    assert scaling.elastic_split(256, 2, 32) == (32, 4)
    assert scaling.elastic_split(64, 8, 32) == (8, 1)
    assert scaling.elastic_split(96, 8, 8) == (6, 2)  # 12 a replica: no batch of 8 divides it
    with pytest.raises(scaling.ScalingError, match="does not divide over 3 replicas"):
        scaling.elastic_split(256, 3, 32)


def _workers(job, out_dir, workers: int, *extra, status: int | None = None,
             only: int | None = None) -> list[dict]:
    """The job in `workers` processes on loopback (MultiWorkerMirroredStrategy, one replica
    each); the chief's and the others' summaries (None where stopped). extra: the worker script's
    arguments, for worker `only` alone where given; status: what every process exits with
    (default: 3 with extra arguments, else 0)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "job.json").write_text(job.to_json())
    cluster = [f"127.0.0.1:{p}" for p in free_ports(workers)]
    procs = []
    for index in range(workers):
        env = dict(os.environ, PYTHONPATH=str(REPO), TF_CONFIG=json.dumps(
            {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}))
        procs.append(python_started(REPO / "tests" / "elastic_worker.py", out_dir / "job.json",
                                    out_dir / f"result-{index}.json",
                                    *(extra if only in (None, index) else ()), env=env))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    results = []
    for index, (proc, out) in enumerate(zip(procs, outs)):
        assert proc.returncode == (status if status is not None else 3 if extra else 0), \
            out[-3000:]
        path = out_dir / f"result-{index}.json"
        results.append(json.loads(path.read_text()) if path.exists() else None)
    return results


def test_sigterm_to_one_machine_every_worker_saves_and_2_resume_with_the_same_weights(
        penguins_run, tmp_path):
    """MultiWorkerMirroredStrategy, one replica a process, trainer.input_order = "global", every
    table split by rows over the worker processes (each holding its own blocks): 4 workers
    stop, 2 resume with accumulation 2 and end with the weights of an uninterrupted run of 4
    workers. The stop is a SIGTERM to worker 2 alone once it has trained 8 steps; the workers
    agree on it after the next chunk (controller.Agreement), every one saves at step 12 and
    exits with status 5, and the resumed job's summary says why. The checkpoint holds each table
    whole (gathered from every worker), and each resumed worker reads its 2 blocks back from it
    (of 4 when written). Mirrored tables through the same stop: tests/test_gpu_machines.py's
    SIGTERM test, the Vertex path of the same 4 processes."""
    settings = {**SETTINGS, "input_order": "global", "shard_embeddings_over": 0}
    whole = _job(penguins_run, tmp_path / "whole", **settings)
    uninterrupted = TrainingSummary.from_dict(_workers(whole, tmp_path / "whole-workers", 4)[0])
    assert [t.blocks for t in uninterrupted.sharded_tables] == [4] * 5
    cut = _job(penguins_run, tmp_path / "cut", **settings)
    results = _workers(cut, tmp_path / "cut-workers", 4, "--sigterm-at", str(STOP_AT),
                       status=5, only=2)
    stop_at = STOP_AT + SETTINGS["steps_per_execution"]  # the chunk after the signal
    assert [r["step"] for r in results] == [stop_at] * 4
    assert all(r["signalled"] == ["worker 2"] for r in results)
    assert results[0]["message"].startswith(
        f"stopped by SIGTERM to worker 2 at step {stop_at}: every worker saved a checkpoint "
        "there"), results[0]["message"]
    saved = resume.parked_dir(cut)  # the chief parked its checkpoints for the next attempt
    assert tf.train.latest_checkpoint(saved).endswith(f"-{stop_at}")
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(saved))
    stopped = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
               if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}
    chief, other = _workers(cut, tmp_path / "resumed-workers", 2)
    difference = _max_difference(_weights(cut), _weights(whole))
    moved = _max_difference(stopped, _weights(whole))
    print(f"elastic resume 4 -> 2 worker processes (accumulation 2), {SETTINGS['train_steps']} "
          f"steps: max abs difference {difference:.1e} against an uninterrupted 4-worker run "
          f"(weights moved {moved:.1e} after the stop)")
    assert difference <= 1e-6 and moved > 1000 * difference
    summary = TrainingSummary.from_dict(chief)
    assert (summary.strategy, summary.replicas, summary.plan.hosts) == (
        "MultiWorkerMirroredStrategy", 2, 2)
    assert any("/blocks/.ATTRIBUTES/rows" in key for key in _weights(cut))
    assert [t.blocks for t in summary.sharded_tables] == [2] * 5
    assert summary.plan.learning_rate == uninterrupted.plan.learning_rate
    assert summary.resume_words() == (
        f"resumed at step {stop_at} (every worker saved at {stop_at} after a SIGTERM to worker "
        "2) on 2 replicas (was 4): accumulation 2 keeps global batch 128")
    assert other["chief"] is False


@pytest.mark.parametrize("hosts", [2, 4])
def test_in_global_order_each_steps_examples_are_the_same_for_any_host_count(tmp_path, hosts):
    """trainer.input_order = "global": each host reads the one order and keeps its slice of every
    global step, so the hosts' slices of a step together are the records one host reads for it
    (with 8 files, more than the hosts, and a resume's skip of 3 steps); "sharded" reads other
    records."""
    from trainer_module import input_pipeline, settings

    spec = {"a_xf": tf.io.FixedLenFeature([], tf.float32),
            "y_xf": tf.io.FixedLenFeature([], tf.int64)}
    paths = []
    for f in range(8):
        paths.append(str(tmp_path / f"part-{f}.gz"))
        with tf.io.TFRecordWriter(paths[-1], options="GZIP") as writer:
            for i in range(64):
                example = tf.train.Example()
                example.features.feature["a_xf"].float_list.value.append(f * 64 + i)
                example.features.feature["y_xf"].int64_list.value.append(i % 3)
                writer.write(example.SerializeToString())
    per_replica, replicas, steps = 8, 8, 6

    def step_records(order_is_global: bool, pipelines: int) -> list[list[int]]:
        dataset_fn = input_pipeline.make_dataset_fn(
            paths, spec, "y", settings.CLASSIFICATION, per_replica, training=True, seed=5,
            skip_steps=3, global_order=order_is_global)
        fed = replicas // pipelines
        shares = [[x["a_xf"].numpy() for x, _ in dataset_fn(tf.distribute.InputContext(
            num_input_pipelines=pipelines, input_pipeline_id=p,
            num_replicas_in_sync=replicas)).take(steps * fed)] for p in range(pipelines)]
        return [sorted(int(v) for share in shares for v in np.concatenate(
            share[s * fed:(s + 1) * fed])) for s in range(steps)]

    one_host = step_records(False, 1)
    assert all(len(records) == per_replica * replicas for records in one_host)
    assert step_records(True, hosts) == one_host
    assert step_records(False, hosts) != one_host
