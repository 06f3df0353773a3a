"""Faults met on real file systems, found before anything runs: a read-only serving dir or
pipeline root, and a disk too small for the run, each one line naming the place, exit 2, within
seconds, with nothing written. Each file system is a real tmpfs mounted here (read-only, or of
1 MB); where this machine does not let the test mount one, it skips and says so.

A disk that fills while a run runs: tests/test_stops.py, in the chain of runs that stops each
node with SIGTERM."""

import re
import subprocess
import time
import uuid

import pytest

from conftest import cli, lockstep


@pytest.fixture
def mount(tmp_path):
    """mount(options) -> a fresh tmpfs with those options; unmounted afterwards."""
    mounted = []

    def make(options: str):
        point = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
        point.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or 'not root'}): "
                        "the fault tests need a real file system of their own")
        mounted.append(point)
        return point

    yield make
    for point in mounted:
        subprocess.run(["umount", str(point)], capture_output=True)


def _refused(tmp_path, *places, process=False) -> str:
    """The run's one line, refused within seconds; process: in a fresh `lockstep` process (its
    start-up counted; not a fork of the tests' fork server, whose own start a first run would
    count: 5.8 s once), else the CLI's main here."""
    tic = time.monotonic()
    argv = ("run", "--pipeline-root", places[0], "--serving-dir", places[1])
    result = lockstep(*argv, cwd=tmp_path, fresh=True) if process else cli(*argv, cwd=tmp_path)
    seconds = time.monotonic() - tic
    assert result.returncode == 2, result.stdout + result.stderr
    assert seconds < 5, seconds
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and not result.stdout.strip(), result.stdout + result.stderr
    return lines[0]


def test_a_read_only_serving_dir_is_refused_before_the_run(tmp_path, mount):
    read_only = mount("size=1m,ro")
    line = _refused(tmp_path, tmp_path / "root", read_only / "serving", process=True)
    assert line == (f"lockstep: error: serving dir {read_only}/serving: cannot write there "
                    f"(at {read_only}): Read-only file system")
    assert not (tmp_path / "root").exists()  # nothing written


def test_a_read_only_pipeline_root_is_refused_before_the_run(tmp_path, mount):
    read_only = mount("size=1m,ro")
    line = _refused(tmp_path, read_only, tmp_path / "serving")
    assert line == (f"lockstep: error: pipeline root {read_only}: cannot write there: "
                    "Read-only file system")


def test_a_disk_too_small_for_the_run_is_refused_with_what_it_needs(tmp_path, mount):
    small = mount("size=1m")
    line = _refused(tmp_path, small / "root", tmp_path / "serving")
    assert line.startswith(f"lockstep: error: the pipeline root {small}/root: the run needs "
                           "about 64.1 MB there, 1.0 MB free"), line
    # Root and serving dir on the one small disk: their needs add up, both are named.
    line = _refused(tmp_path, small / "root", small / "serving")
    assert line.startswith(f"lockstep: error: the pipeline root {small}/root and the serving dir "
                           f"{small}/serving: the run needs about 128.1 MB there"), line
    assert list(small.iterdir()) == []


def _zero(path, at: int = 200) -> None:
    """64 bytes of `path` overwritten (zeros, or ones where zeros were): a disk fault."""
    content = bytearray(path.read_bytes())
    at = min(at, max(len(content) - 64, 0))
    content[at:at + 64] = bytes(64) if content[at:at + 64] != bytes(64) else b"\xff" * 64
    path.write_bytes(bytes(content))


def _newest(run, pattern: str):
    """The file matching `pattern` (under the pipeline root) in the newest execution's output."""
    return max(run.pipeline_root.glob(pattern),
               key=lambda p: int(p.relative_to(run.pipeline_root).parts[2]))


@pytest.mark.slow
def test_sigterm_while_training_resumes_then_each_corrupt_cached_artifact_is_run_again(
        tmp_path, penguins_run):
    """One chain of runs on one pipeline root, each part needing a completed run of its own
    before it: the first part's is the second's. SIGTERM while the Trainer trains, then the run
    that resumes it; then a cached output damaged at a time, each run after it again."""
    from conftest import PipelineRun

    run = PipelineRun(tmp_path)
    _sigterm_while_training_then_resumed(tmp_path, run)
    _each_corrupt_cached_artifact(run, penguins_run)


def _sigterm_while_training_then_resumed(tmp_path, run) -> None:
    """`lockstep run` gets SIGTERM (a pod evicted, a `kill`) while the Trainer trains: one line,
    exit 5, nothing pushed; the next run reuses every completed component, resumes the Trainer
    at the step saved, and pushes the model that training the same job without a stop gives."""
    import glob
    import os
    import signal

    import numpy as np
    import tensorflow as tf

    from conftest import REPO, eval_examples, lockstep_started, python_started
    from pipeline import config as config_lib, definition
    from trainer_module.job import TrainJob

    steps = 3000  # about 5 s of training here: progress lines come about once a second
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    process = lockstep_started("run", "--pipeline-root", run.pipeline_root, "--serving-dir",
                               run.serving_dir, "--train-steps", steps, cwd=tmp_path,
                               env={"PYTHONUNBUFFERED": "1"})
    for line in process.stdout:
        if re.match(rf"^  Trainer +step \d+/{steps} ", line):
            process.send_signal(signal.SIGTERM)
            break
    process.stdout.read()
    assert process.wait(timeout=300) == 5
    [line] = process.stderr.read().strip().splitlines()[-1:]
    saved = re.match(r"lockstep: error: stopped by SIGTERM at step (\d+): a checkpoint was "
                     r"saved there \((.*/Trainer/model_run/\.interrupted/\w+/ckpt-\d+)\); run "
                     r"again to resume from it$", line)
    assert saved, line
    step = int(saved.group(1))
    assert 0 < step < steps and saved.group(2).endswith(f"ckpt-{step}")
    assert run.pushed_versions() == []

    result = run.run("--train-steps", str(steps))
    assert result.returncode == 0, result.stderr[-2000:]
    for node in ("CsvExampleGen", "Transform"):
        assert re.search(rf"^  {node} +cached", result.stdout, re.M), result.stdout
    assert (f"Checkpoints: resumed at step {step} (saved there after a SIGTERM)"
            in result.stdout), result.stdout
    [version] = run.pushed_versions()

    # The same job trained without a stop, in a fresh process, from the run's own inputs.
    root = run.pipeline_root
    [examples] = glob.glob(str(root / "CsvExampleGen" / "examples" / "*"))
    [transform] = glob.glob(str(root / "Transform" / "transform_graph" / "*"))
    config = config_lib.load(None, {"trainer.train_steps": steps})
    job = TrainJob(train_files=[f"{examples}/Split-train/*"], eval_files=[],
                   transform_dir=transform, model_run_dir=str(tmp_path / "clean" / "run"),
                   serving_model_dir=str(tmp_path / "clean" / "model"),
                   spec=definition.train_spec(config, "species", "classification"))
    (tmp_path / "job.json").write_text(job.to_json())
    clean = python_started(REPO / "tests" / "train_job.py", tmp_path / "job.json",
                           tmp_path / "result.json", env=env)
    out, _ = clean.communicate(timeout=600)
    assert clean.returncode == 0, out[-2000:]
    serialized, _ = eval_examples(glob.glob(f"{examples}/Split-eval/*"), "species")
    predict = lambda path: tf.saved_model.load(str(path)).signatures["serving_default"](  # noqa: E731
        examples=tf.constant(serialized))["probabilities"].numpy()
    np.testing.assert_allclose(predict(version), predict(job.serving_model_dir), atol=1e-6)


def _each_corrupt_cached_artifact(run, penguins_run) -> None:
    """Bytes overwritten in a cached output (a disk fault), one artifact a run, on a root whose
    last run pushed a model other than a clean run's (other training steps): its manifest in
    ML Metadata (size and CRC-32 of each file, recorded as its node ran) names the file before
    anything reads it; that node runs again once, not from the cache, and the run completes with
    the model a clean run pushes. Examples, the Transform graph and the model (the schema and the
    statistics: tests/test_dag_runner.py); then the serving version the baseline would be: passed
    over, with a line."""
    import numpy as np
    import tensorflow as tf

    from conftest import eval_examples

    assert len(run.pushed_versions()) == 1
    files = list(penguins_run.pipeline_root.glob("CsvExampleGen/examples/*/Split-eval/*"))
    serialized, _ = eval_examples(files, "species")
    predict = lambda path: tf.saved_model.load(str(path)).signatures["serving_default"](  # noqa: E731
        examples=tf.constant(serialized))["probabilities"].numpy()
    clean = predict(penguins_run.pushed_versions()[0])
    for node, output, pattern in (
            ("CsvExampleGen", "examples", "CsvExampleGen/examples/*/Split-train/*.gz"),
            ("Transform", "transform_graph",
             "Transform/transform_graph/*/transform_fn/saved_model.pb"),
            ("Trainer", "model", "Trainer/model/*/Format-Serving/variables/variables.data-*")):
        damaged = _newest(run, pattern)
        _zero(damaged)
        result = run.run()  # the default steps: a clean run's settings (penguins_run's)
        assert result.returncode == 0, result.stderr[-2000:]
        said = [line for line in result.stdout.splitlines() if "not what" in line]
        assert said == [f"lockstep: {node}'s cached {output} is not what {node} wrote: {damaged} "
                        "has other bytes than were written (its CRC-32 differs); running "
                        f"{node} again, not from the cache"], result.stdout
        assert re.search(rf"^  {node} +executed", result.stdout, re.M), result.stdout
        np.testing.assert_allclose(predict(run.pushed_versions()[-1]), clean, atol=1e-6)

    # The serving version itself damaged: never the baseline; the one before it is, and the
    # same model, pushed again, replaces it.
    [older, newest] = run.pushed_versions()[-2:]
    _zero(next((newest / "variables").glob("variables.data-*")), at=0)
    result = run.run()
    assert result.returncode == 0, result.stderr[-2000:]
    assert (f"Baseline: the serving model, {older}; version {newest.name} passed over: its files "
            "are not what was pushed (sha256 against its push record); a model server would "
            "serve it: remove it") in result.stdout, result.stdout
    assert int(run.pushed_versions()[-1].name) > int(newest.name)
    np.testing.assert_allclose(predict(run.pushed_versions()[-1]), clean, atol=1e-6)


def test_a_span_that_leads_out_of_the_data_root_is_refused(tmp_path):
    from components import spans

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "part.csv").write_text("x,y\n1,a\n")
    (outside / "_SUCCESS").write_text("")
    root = tmp_path / "data"
    (root / "span-1").mkdir(parents=True)
    (root / "span-1" / "part.csv").write_text("x,y\n1,a\n")
    (root / "span-1" / "_SUCCESS").write_text("")
    (root / "span-2").symlink_to(outside)  # a newer span that is a link out of the root
    with pytest.raises(spans.SpanError, match=rf"span-2/part.csv: resolves to {outside}/part.csv, "
                                              rf"outside the data root {root} \(a symlink or '..'\)"):
        spans.select(str(root), "span-{SPAN}/*.csv")
    result = cli("run", "--data", root, "--label", "y", "--config", _config(
        tmp_path, 'span_pattern = "span-{SPAN}/*.csv"'), cwd=tmp_path)
    assert result.returncode == 2 and "outside the data root" in result.stderr
    result = cli("run", "--data", root, "--label", "y", "--config", _config(
        tmp_path, 'span_pattern = "../span-{SPAN}/*.csv"'), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("data.span_pattern must stay under data.path (no '..', "
                                          "not absolute), got '../span-{SPAN}/*.csv'")


def _config(tmp_path, line: str):
    path = tmp_path / f"c{uuid.uuid4().hex[:6]}.toml"
    path.write_text(f"[data]\n{line}\n")
    return path


def test_a_token_file_other_users_can_read_is_refused(tmp_path):
    from pipeline.kubeflow import client

    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o644)
    with pytest.raises(client.KfpError, match=rf"^--token-file {token}: readable by other users "
                                              r"\(mode 644\); chmod 600 it$"):
        client.resolve_token(str(token))
    token.chmod(0o600)
    assert client.resolve_token(str(token)) == "secret"


def test_a_kubeflow_task_that_cannot_write_its_outputs_stops_before_it_runs(tmp_path, mount):
    """A task's outputs (and a Pusher's serving dir) on a read-only mount: one line naming the
    place, status 2, in well under the seconds a task's imports take."""
    import json
    import sys

    from components import entrypoint
    from conftest import REPO

    read_only = mount("size=1m,ro")
    executor_input = {"inputs": {"parameterValues": {"serving_dir": str(read_only / "serving")}},
                      "outputs": {"artifacts": {"pushed_model": {"artifacts": [
                          {"uri": str(tmp_path / "root" / "Pusher" / "pushed_model")}]}},
                          "outputFile": str(tmp_path / "out.json")}}
    command = [sys.executable, "-m", "components.entrypoint", "--executor_class_path",
               entrypoint.PUSHER_EXECUTOR, entrypoint.INVOCATION_FLAG, json.dumps(executor_input)]
    tic = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert time.monotonic() - tic < 5
    assert result.returncode == entrypoint.UNWRITABLE_STATUS, result.stderr
    assert result.stderr.strip() == (f"lockstep-task: cannot write {read_only}/serving: "
                                     "Read-only file system")
    # The baseline only reads the serving dir: not probed. An output on the mount is.
    executor_input["outputs"]["artifacts"]["pushed_model"]["artifacts"][0]["uri"] = \
        str(read_only / "Pusher" / "pushed_model")
    assert entrypoint.places_written(["--executor_class_path", "components.latest_model.Executor",
                                      entrypoint.INVOCATION_FLAG, json.dumps(executor_input)]) \
        == [str(read_only / "Pusher" / "pushed_model")]
    assert entrypoint.unwritable([entrypoint.INVOCATION_FLAG, json.dumps(executor_input)]) == (
        f"lockstep-task: cannot write {read_only}/Pusher/pushed_model: Read-only file system")


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (15 - 1)))


def test_a_kubeflow_task_stopped_by_sigterm_outside_training_says_so_with_status_5(tmp_path):
    """SIGTERM reaches a task (its pod evicted) while it imports, before its executor's work:
    within seconds it exits with the status for "stopped, run again" and one line naming its
    executor, rather than being killed at the end of the grace period."""
    import json
    import signal
    import sys

    from components import entrypoint
    from conftest import REPO
    from runtime import termination

    executor_input = {"inputs": {"parameterValues": {"serving_dir": str(tmp_path / "serving")}},
                      "outputs": {"artifacts": {"pushed_model": {"artifacts": [
                          {"uri": str(tmp_path / "root" / "Pusher" / "pushed_model")}]}},
                          "outputFile": str(tmp_path / "out.json")}}
    process = subprocess.Popen(
        [sys.executable, "-m", "components.entrypoint", "--executor_class_path",
         entrypoint.PUSHER_EXECUTOR, entrypoint.INVOCATION_FLAG, json.dumps(executor_input)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"})
    deadline = time.monotonic() + 60
    while not _catches_sigterm(process.pid):  # its handler is in: then its imports (seconds)
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.01)
    assert process.poll() is None
    tic = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert time.monotonic() - tic < 5
    assert process.returncode == termination.PREEMPTED_STATUS, err[-2000:]
    assert err.strip().splitlines()[-1] == (
        "lockstep-task: stopped by SIGTERM while components.pusher ran; nothing it wrote is "
        "published: a retry runs it again")
    assert not (tmp_path / "out.json").exists()
