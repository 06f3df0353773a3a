"""Asynchronous training (trainer.strategy = parameter_server): what the config refuses, the
plan, the staleness count on constructed cases, a killed worker, a whole pipeline run that
pushes a model that serves, and benchmarks/sync_vs_async.py's smoke run on that run's root.

A ParameterServerStrategy connects its process to a cluster for good, so everything that trains
runs in processes of its own."""

import json
import os
import re
import shutil

import pytest

from conftest import REPO, PipelineRun, failed_run, penguins_job, python_started, serving_accuracy
from test_benchmarks import TABLES, smoke
from trainer_module import scaling
from trainer_module.settings import TrainerConfig, TrainerConfigError
from runtime.processes import free_ports

ENV = dict(os.environ, PYTHONPATH=str(REPO), TF_USE_LEGACY_KERAS="1")


@pytest.mark.parametrize("setting, named", [
    ({"precision": "mixed_float16"}, "mixed_float16"),
    ({"tpu_slice": "v5e-4"}, "a TPU"),
    ({"accumulation_steps": 2}, "accumulation_steps"),
    ({"emulate_replicas": 4}, "emulate_replicas"),
    ({"verify": True}, "trainer.verify"),
    ({"jit_compile": True}, "jit_compile"),
    ({"ps_workers": 0}, "ps_workers"),
])
def test_what_asynchronous_training_cannot_do_is_one_line_naming_it(setting, named):
    with pytest.raises(TrainerConfigError) as err:
        TrainerConfig(strategy="parameter_server", **setting).validate()
    message = str(err.value)
    assert "\n" not in message and named in message, message


def test_the_plan_counts_updates_of_one_workers_batch():
    cfg = TrainerConfig(strategy="parameter_server", ps_workers=3, ps_servers=2,
                        per_replica_batch=64, train_examples=64_000)
    plan = scaling.make_plan(cfg, replicas=1)
    # No global step: one update is one worker's batch, the learning rate scales with it.
    assert (plan.workers, plan.parameter_servers, plan.global_batch) == (3, 2, 64)
    assert plan.train_steps == 1000
    assert plan.learning_rate == pytest.approx(cfg.base_learning_rate * (64 / cfg.base_batch) ** 0.5)
    text = plan.describe()
    assert "asynchronous data parallel" in text and "3  (through 2 parameter servers)" in text
    assert "updates               1000  (all workers together" in text
    # TF_CONFIG's cluster, not the config's, where there is one.
    assert scaling.make_plan(cfg, 1, cluster=(5, 1)).workers == 5
    assert not scaling.make_plan(TrainerConfig(train_steps=10), 4).asynchronous


def _staleness(workers: int, sleep: float, steps: int):
    """tests/ps_staleness.py in a process of its own (a fork of the tests' fork server where it
    can be one), its stdout and stderr together."""
    return python_started(REPO / "tests" / "ps_staleness.py", workers, sleep, steps, env=ENV)


@pytest.mark.slow
def test_staleness_is_none_alone_and_the_other_workers_updates_when_steps_overlap():
    alone, three = _staleness(1, 0.0, 40), _staleness(3, 0.04, 90)
    results = []
    for child in (alone, three):
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0, out[-3000:]
        # Its one JSON line, among its logs (stderr comes with it).
        results.append(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    alone, three = results
    # One worker: nothing lands between its read and its update; one update per step, counted
    # by the optimizer too.
    assert (alone["staleness_mean"], alone["staleness_max"]) == (0, 0)
    assert alone["updates"] == alone["iterations"] == 40
    # Three workers whose steps are mostly a sleep between read and update: each update has the
    # other two workers' updates land inside it (2), less where a chunk starts and ends.
    assert three["updates"] == three["iterations"] == 90
    assert 1.2 <= three["staleness_mean"] <= 2.2, three
    assert three["staleness_max"] >= 2, three


@pytest.mark.slow
@pytest.mark.parametrize("servers", [2, 3])
def test_a_table_split_over_the_parameter_servers_trains_as_one_device(servers, tmp_path):
    """tests/ps_tables.py: one worker, the built-in model's id table split over the servers by
    the strategy's partitioner, 24 AdamW steps (ids repeated in a batch); the same model on one
    device with Keras, on the same batches; with 3 servers, the job stopped at step 12 with the
    table over 2 resumed over 3, and over 3 resumed over 2."""
    child = python_started(REPO / "tests" / "ps_tables.py", servers, 24, tmp_path, env=ENV)
    out, _ = child.communicate(timeout=300)
    assert child.returncode == 0, out[-3000:]
    found = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    # Only the table past the threshold is split, in contiguous blocks, one on each server.
    assert found["split_layers"] == ["embed_user"], found
    sizes = [rows for rows, _ in found["parts"]]
    assert len(sizes) == servers and sum(sizes) == 37 and max(sizes) - min(sizes) <= 1, found
    assert [d.split("/")[1:4] for d in found["devices"]] == [
        ["job:ps", "replica:0", f"task:{i}"] for i in range(servers)], found
    assert found["names"] and found["updates"] == 24 and found["moved"] > 0.05, found
    assert found["difference"] <= 1e-6, found
    # The checkpoint holds the whole table (restored into the unsplit model), and the served
    # model's weights warm-start every weight of a split model, the table's parts included.
    assert found["restored"] == 0.0, found
    assert found["warm_matched"] == found["weights"] and found["warm"] == 0.0, found
    # Resumed on another number of servers: the checkpoint's table, Adam's slots and early
    # stopping's best weights read back into the new split; one device's weights at the end.
    resumed = found["resumed"]
    assert [[len(p) for p in r["parts"]] for r in resumed] == (
        [[2, 3], [3, 2]] if servers == 3 else []), found
    for leg in resumed:
        assert leg["steps"] == 24 and leg["best_restored"] == 0.0, found
        assert leg["difference"] <= 1e-6, found


def _servers(cluster: dict, tmp_path, servers: int = 1) -> dict:
    """The workers' and the parameter servers' processes (`python -m
    trainer_module.parameter_server`, forks of the tests' fork server where they can be), each
    logging to tmp_path/<task>-<index>/stdout."""
    servers_by_task = {}
    for task in [("worker", 0), ("worker", 1)] + [("ps", i) for i in range(servers)]:
        log = tmp_path / f"{task[0]}-{task[1]}"
        log.mkdir()
        servers_by_task[task] = python_started("-m", "trainer_module.parameter_server", output=log,
                                       env=dict(ENV, TF_CONFIG=json.dumps({
                                           "cluster": cluster,
                                           "task": {"type": task[0], "index": task[1]}})))
    return servers_by_task


@pytest.fixture(scope="module")
def ps_run(penguins_run, tmp_path_factory):
    """The bundled data, trainer.strategy = parameter_server and nothing else: a copy of the
    shared run's pipeline root, so the ExampleGen comes from the cache; Transform runs again, in
    tf.Transform's TF2 graph (a parameter-server worker gets the transform's tables copied from
    the chief: pipeline/definition.py, transform_settings), and the Trainer, Evaluator and Pusher."""
    from pipeline.local import run_lock

    root = tmp_path_factory.mktemp("ps")
    # Copied under the root's run lock: with workers, test_pipeline_e2e may run on it meanwhile.
    with run_lock.hold(str(penguins_run.pipeline_root / run_lock.LOCK_FILE), wait_seconds=600):
        shutil.copytree(penguins_run.pipeline_root, root / "pipeline_root")
    (root / "ps.toml").write_text('[trainer]\nstrategy = "parameter_server"\n')
    run = PipelineRun(root)
    run.result = run.run("--config", root / "ps.toml")
    return run


@pytest.mark.slow
def test_a_killed_worker_does_not_stop_training(ps_run, tmp_path):
    """A cluster of processes named by TF_CONFIG, as on Kubernetes: two workers and a parameter
    server serve (`python -m trainer_module.parameter_server`), the chief trains; one worker is
    killed once training is under way, and the coordinator finishes on the other. Two
    parameter servers, every embedding table split over them (shard_embeddings_over = 0)."""
    ports = [f"localhost:{port}" for port in free_ports(5)]
    cluster = {"chief": ports[:1], "worker": ports[1:3], "ps": ports[3:]}
    servers = _servers(cluster, tmp_path, servers=2)
    # The transform graph the parameter-server run made (TF2: its tables reach the workers).
    job = penguins_job(ps_run, tmp_path, strategy="parameter_server", train_steps=600,
                       log_every=20, steps_per_execution=5, validation_share=0.0,
                       shard_embeddings_over=0)
    (tmp_path / "job.json").write_text(job.to_json())
    chief_env = dict(ENV, TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "chief", "index": 0}}))
    try:
        chief = python_started(REPO / "tests" / "train_job.py", tmp_path / "job.json",
                               tmp_path / "result.json", env=chief_env)
        log, killed_at = [], None
        for line in chief.stdout:
            log.append(line)
            if killed_at is None and "/600 " in line:
                servers[("worker", 1)].kill()
                killed_at = line
        chief.wait(timeout=600)
    finally:
        for server in servers.values():
            server.kill()
    text = "".join(log)
    assert chief.returncode == 0, text[-3000:]
    assert killed_at is not None and "step 600/600" not in killed_at, text[-3000:]
    assert "Worker /job:worker/replica:0/task:1 failed" in text, text[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["strategy"] == "ParameterServerStrategy"  # as users know it
    assert result["asynchronous"]["workers"] == 2 and result["asynchronous"]["updates"] == 600
    tables = result["sharded_tables"]
    assert tables and all(t["blocks"] == 2 and t["holders"] == "parameter servers"
                          for t in tables), tables
    # Exported whole, from the chief's copy: it serves the eval rows as a trained model does.
    assert (tmp_path / "serving" / "saved_model.pb").is_file()
    eval_files = sorted((ps_run.pipeline_root / "CsvExampleGen" / "examples").glob(
        "*/Split-eval/*"))
    assert serving_accuracy(str(tmp_path / "serving"), eval_files) >= 0.9


@pytest.mark.slow
def test_a_parameter_server_run_pushes_a_model_that_serves(ps_run):
    run, result = ps_run, ps_run.result
    assert result.returncode == 0, failed_run(result)
    out = result.stdout
    assert "Trainer: ParameterServerStrategy on " in out, out
    assert "Asynchronous: 2 worker(s), 1 parameter server(s), " in out, out
    assert "Blessed: yes" in out, out
    [version] = run.pushed_versions()
    eval_files = sorted((run.pipeline_root / "CsvExampleGen" / "examples").glob("*/Split-eval/*"))
    accuracy = serving_accuracy(version, eval_files)
    assert accuracy >= 0.9
    reported = float(re.search(r"^Eval metrics: .*\bsparse_categorical_accuracy ([\d.]+)", out,
                               re.M).group(1))
    assert accuracy == pytest.approx(reported, abs=0.01)
    summaries = sorted(run.pipeline_root.glob("Trainer/model_run/*/training_summary.json"),
                       key=os.path.getmtime)
    summary = json.loads(summaries[-1].read_text())
    assert summary["plan"]["workers"] == 2
    # Early stopping: the chief scores the validation rows on a copy of the servers' weights and
    # stops scheduling; the best scored weights are the ones exported.
    stopping = summary["stopping"]
    assert stopping["validation_rows"] > 0 and 0 < stopping["best_step"] <= stopping["stopped_at"]
    assert re.search(r"^Early stopping: ", out, re.M), out
    assert summary["asynchronous"]["updates"] >= stopping["stopped_at"]
    if stopping["stopped_early"]:
        assert stopping["stopped_at"] < summary["plan"]["train_steps"]
    else:
        assert summary["asynchronous"]["updates"] == summary["plan"]["train_steps"]


@pytest.mark.slow
def test_the_sync_vs_async_benchmark_prints_its_table(ps_run, tmp_path):
    """benchmarks/sync_vs_async.py's smoke (tests/test_benchmarks.py names this test for it), on
    the parameter-server run's root, whose transform graph is TF2's as the benchmark needs: a
    sync and an async cluster of processes, each with a straggler (the smoke's two runs)."""
    assert ps_run.result.returncode == 0, failed_run(ps_run.result)
    out = smoke("sync_vs_async.py", tmp_path, "--pipeline-root", ps_run.pipeline_root)[0]
    assert TABLES["sync_vs_async.py"] in out, out
    rows = re.findall(r"^(\S+)\s+\d+\s+\d+\s+\d+\s", out, re.M)
    assert rows == ["sync-straggler", "async-straggler"], out
