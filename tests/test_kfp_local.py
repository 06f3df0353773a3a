"""The compiled spec, run the way Kubeflow Pipelines runs it: kfp.local's DAG orchestrator builds
each task's executor input, each task runs its own container command as a process of its own.
The run is of examples/wide_deep, a user's own model and preprocessing by dotted path: each task
process finds that code through PYTHONPATH, as a task in the image does (tests/test_image.py).

The run is the one benchmarks/kfp_local.py makes (its smoke run, on this example): the suite's one
kfp.local run of the whole spec, checked here, beside the benchmark's table."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import tensorflow as tf
import yaml

from conftest import REPO, lockstep, serving_accuracy
from test_benchmarks import TABLES

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "wide_deep"
TASKS = ["CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "GradientBoosting",
         "Transform", "Trainer", "LatestPushedModel", "Evaluator", "Pusher"]


@pytest.fixture(scope="session")
def kfp_local_run(wide_deep_runs):
    """`lockstep run --orchestrator kfp-local` on the example, as benchmarks/kfp_local.py --smoke
    runs it (beside a LocalDagRunner run, tests/test_example.py's, and the spec under TFX's stock
    task command; tests/conftest.py, `wide_deep_runs`): its root and its stdout; the benchmark's
    own output as `benchmark`."""
    run = wide_deep_runs.kfp
    [run.pipeline_dir] = [p for p in run.pipeline_root.iterdir() if p.name.startswith("wide-deep-")]
    run.benchmark = wide_deep_runs.benchmark
    return run


def test_the_kfp_local_benchmark_prints_its_table(kfp_local_run):
    """benchmarks/kfp_local.py's smoke (tests/test_benchmarks.py names this test for it)."""
    out = kfp_local_run.benchmark
    assert TABLES["kfp_local.py"] in out, out
    # A row per task: lockstep's task command, and TFX's stock one on the first task (the
    # smoke's; the whole spec at full size).
    rows = re.findall(r"^(\w+)(?:\s+-?[\d.]+s){2}\s+(-?[\d.]+s|-)\s+(?:-?[\d.]+s|-)(?:\s|$)", out,
                      re.M)
    assert [task for task, _ in rows] == TASKS + ["sum"], out
    stock = [task for task, seconds in rows if seconds != "-"]
    assert stock == ["CsvExampleGen", "sum"], out


def test_kfp_local_runs_every_task_to_a_model_that_serves(kfp_local_run):
    out = kfp_local_run.result.stdout
    # One line per task as it ends (its time and start-up), then the same summary as a
    # LocalDagRunner run.
    assert re.findall(r"^  (\w+)\s+done\s+[\d.]+s \(start-up [\d.]+s\)$", out, re.M) == TASKS, out
    assert "Blessed: yes" in out and "Baseline: none (first model)" in out
    assert re.search(r"^Eval metrics: .*sparse_categorical_accuracy", out, re.M)
    # The gradient-boosting reference's task wrote its figures where the report reads them.
    reference = re.search(r"^Reference: LightGBM [\d.]+ \(its defaults\) on this split: auc "
                          r"([\d.]+) \(fit on "
                          r"[\d,]+ train rows in [\d.]+ s\); this model ([\d.]+)$", out, re.M)
    assert reference and 0.6 < float(reference.group(1)) <= 1, out
    assert re.search(rf"^Eval metrics: auc {reference.group(2)}, ", out, re.M)
    # Each task ran in a directory named for it (TFX names carry no comp- prefix), from the
    # executor input kfp.local built, and logged to its own file.
    assert sorted(p.name for p in kfp_local_run.pipeline_dir.iterdir()) == sorted(TASKS)
    trainer_log = (kfp_local_run.pipeline_dir / "Trainer" / "task.log").read_text()
    assert "lockstep-task: executor Do begins at" in trainer_log
    # A Beam task's pipeline runs in its own memory: no task packaged TFX for Beam's workers (TFX
    # did in each, given the task's own path for a Beam argument: components/entrypoint.py).
    for task in ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator"):
        log = (kfp_local_run.pipeline_dir / task / "task.log").read_text()
        assert "lockstep-task: executor Do begins at" in log, task
        assert "Python dependency for beam" not in log and "tfx_ephemeral" not in log, task
    # Downstream tasks got TFX's types, not system.Artifact.
    command = json.loads((kfp_local_run.pipeline_dir / "Trainer" / "command.json").read_text())
    executor_input = json.loads(command[command.index("--json_serialized_invocation_args") + 1])
    examples = executor_input["inputs"]["artifacts"]["examples"]["artifacts"][0]
    assert examples["type"]["schemaTitle"] == "tfx.Examples"
    assert command[:3] == [command[0], "-m", "components.entrypoint"]
    [version] = kfp_local_run.pushed_versions()
    assert f"Model pushed to: {version}" in out
    # The same report page as a LocalDagRunner run's, named for kfp.local's run.
    page = re.search(r"^Report: (.*)$", out, re.M).group(1)
    assert page.endswith(f"/reports/{kfp_local_run.pipeline_dir.name}.html")
    assert "data-metric='sparse_categorical_accuracy'" in open(page).read()
    files = (kfp_local_run.pipeline_dir / "CsvExampleGen" / "examples" / "Split-eval").glob("*")
    assert serving_accuracy(version, list(files), label="Status") > 0.75  # always "good": 0.72
    assert "Model: wide_deep.model:build, loss built-in (your code)" in out


def test_lockstep_runs_and_report_read_a_kfp_local_root(kfp_local_run, tmp_path):
    """A kfp-local run keeps no ML Metadata: `lockstep runs` and `lockstep report` read it back
    from its task directories, with the figures its summary printed."""
    out = kfp_local_run.result.stdout
    root = kfp_local_run.pipeline_root
    assert not (root / "metadata.sqlite").exists()
    listed = lockstep("runs", "--pipeline-root", root)
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    pushed = re.search(r"^Model pushed to: (.*)$", out, re.M).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  \S+/examples/wide_deep/data  10 executed, "
                        r"0 cached  .*\bauc [\d.]+.*  pushed %s  \(%s\)"
                        % (re.escape(pushed), re.escape(kfp_local_run.pipeline_dir.name)), line), line
    [row] = json.loads(lockstep("runs", "--pipeline-root", root, "--json").stdout)
    summary = dict(re.findall(r"([a-z_]+) (-?[\d.]+)",
                              re.search(r"^Eval metrics: (.*)$", out, re.M).group(1)))
    assert {k: f"{v:.4f}" for k, v in row["metrics"].items() if "diff" not in k} == summary
    assert row["blessed"] is True and row["unfinished"] == {}
    assert sorted(row["executed"]) == sorted(TASKS)
    page = lockstep("report", "--pipeline-root", root, "--output", tmp_path)
    assert page.returncode == 0, page.stderr
    assert page.stdout.strip() == f"lockstep: wrote {tmp_path / kfp_local_run.pipeline_dir.name}.html"


def test_a_failing_task_is_named_in_one_line(kfp_local_run, tmp_path):
    from pipeline.local import kfp_local

    spec = kfp_local_run.pipeline_root / "kfp-local" / "pipeline.yaml"
    docs = list(yaml.safe_load_all(spec.read_text()))
    executor = docs[0]["deploymentSpec"]["executors"]["StatisticsGen_executor"]["container"]
    executor["args"][executor["args"].index("--executor_class_path") + 1] = "components.nowhere.Executor"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    with pytest.raises(kfp_local.TaskFailed) as failed:
        kfp_local.run(str(broken), str(tmp_path / "root"))
    message = str(failed.value)
    assert message.startswith("task StatisticsGen failed") and "\n" not in message
    log = Path(message.rsplit(" ", 1)[-1])
    assert "components.nowhere" in log.read_text()
    # Nothing ran after it.
    ran = {p.name for p in next((tmp_path / "root").glob("wide-deep-*")).iterdir()}
    assert ran == {"CsvExampleGen", "StatisticsGen"}


def _trainer_command(pipeline_dir: Path, out: Path, **trainer) -> list[str]:
    """The Trainer's container command from the kfp-local run, with outputs under `out`."""
    command = json.loads((pipeline_dir / "Trainer" / "command.json").read_text())
    at = command.index("--json_serialized_invocation_args") + 1
    executor_input = json.loads(command[at])
    for key, artifacts in executor_input["outputs"]["artifacts"].items():
        for artifact in artifacts["artifacts"]:
            artifact["uri"] = str(out / key)
    executor_input["outputs"]["outputFile"] = str(out / "executor_output.json")
    params = executor_input["inputs"]["parameterValues"]
    custom = json.loads(params["custom_config"])
    custom["trainer"].update(trainer)
    params["custom_config"] = json.dumps(custom)
    params["train_steps"] = trainer["train_steps"]
    command[at] = json.dumps(executor_input)
    return command


def _final_weights(checkpoints: Path):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(checkpoints)))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}


def test_a_retried_trainer_task_resumes_from_its_checkpoint(kfp_local_run, tmp_path):
    """What KFP does when a preempted TPU node kills the Trainer's pod: it runs the same
    container command with the same executor input again. The retry finds the checkpoints
    (under the ModelRun URI) and ends with the weights of an uninterrupted run."""
    # verify off: the example's check before training (about 45 s a process) is not what this
    # test is about, and three Trainer processes would run it.
    settings = dict(train_steps=600, checkpoint_every=100, steps_per_execution=1, seed=7,
                    verify=False)
    # The task's environment: the example's hooks on PYTHONPATH (in the image, its ENV does it).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLE), str(REPO)]))
    # The uninterrupted run beside the one that is cut (two cores).
    whole = subprocess.Popen(
        _trainer_command(kfp_local_run.pipeline_dir, tmp_path / "whole", **settings),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    cut = _trainer_command(kfp_local_run.pipeline_dir, tmp_path / "cut", **settings)
    checkpoints = tmp_path / "cut" / "model_run" / "checkpoints"
    process = subprocess.Popen(cut, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 600
    while not (checkpoints / "checkpoint").exists() and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)  # the node went away mid-training
    process.wait()
    assert process.returncode == -signal.SIGKILL, "training ended before it could be cut"
    saved = tf.train.latest_checkpoint(str(checkpoints))
    step = int(saved.rsplit("-", 1)[1])
    assert 0 < step < 600
    assert not (tmp_path / "cut" / "model" / "Format-Serving").exists()

    out, _ = whole.communicate(timeout=900)
    assert whole.returncode == 0, out[-3000:]

    retry = subprocess.run(cut, capture_output=True, text=True, timeout=900, env=env)  # same input
    assert retry.returncode == 0, retry.stdout[-3000:] + retry.stderr[-3000:]
    log = retry.stdout + retry.stderr
    resumed = int(re.search(r"Resumed from \S+ at global step (\d+)", log).group(1))
    assert resumed >= step
    final = _final_weights(checkpoints)
    expected = _final_weights(tmp_path / "whole" / "model_run" / "checkpoints")
    assert final.keys() == expected.keys()
    for name in expected:
        assert (final[name] == expected[name]).all(), name
    assert (tmp_path / "cut" / "model" / "Format-Serving" / "saved_model.pb").exists()


def test_a_vertex_trainer_task_runs_the_trainer_as_the_job_it_submits(kfp_local_run, tmp_path):
    """The Trainer task of a multi-host slice, from the executor input kfp.local gave this run's
    Trainer: it submits a Vertex AI job (to the stand-in, which runs the job's container command
    here as Vertex would on the slice, CPU standing in for the TPU), waits, and ends once the job
    has written the model to the task's own output URIs, a model that serves."""
    import sys

    from vertex_standin import VertexStandIn

    command = _trainer_command(kfp_local_run.pipeline_dir, tmp_path / "task", train_steps=60,
                               steps_per_execution=10, verify=False)
    command[0] = sys.executable
    command[command.index("--executor_class_path") + 1] = "components.vertex_training.Executor"
    at = command.index("--json_serialized_invocation_args") + 1
    executor_input = json.loads(command[at])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLE), str(REPO)]))
    with VertexStandIn(run_containers=True, env={"PYTHONPATH": env["PYTHONPATH"]}) as standin:
        executor_input["inputs"]["parameterValues"].update({
            "vertex_project": "acme", "vertex_region": "us-central1",
            "vertex_service_account": "", "vertex_network": "", "vertex_image": "img:1",
            "vertex_tpu_slice": "v5e-16", "vertex_api_endpoint": standin.endpoint,
            "vertex_poll_seconds": 0.5, "vertex_resubmits": 0})
        command[at] = json.dumps(executor_input)
        task = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
        assert task.returncode == 0, task.stderr[-3000:]
        [job] = standin.jobs.values()
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] == {
        "machineType": "ct5lp-hightpu-4t", "tpuTopology": "4x4"}
    model = tmp_path / "task" / "model" / "Format-Serving"
    files = (kfp_local_run.pipeline_dir / "CsvExampleGen" / "examples" / "Split-eval").glob("*")
    assert serving_accuracy(model, list(files), label="Status") > 0.6
    summary = json.loads((tmp_path / "task" / "model_run" / "training_summary.json").read_text())
    assert summary["plan"]["train_steps"] == 60
