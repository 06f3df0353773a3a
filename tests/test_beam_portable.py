"""The pipeline's Beam components run on Beam's portable runner, not only in memory (in the
same run, its Trainer on 8 emulated replicas).

`beam_args` goes unchanged to every Beam component (CsvExampleGen, StatisticsGen, Transform,
Evaluator). With the portable runner, each transform is pickled, sent through the job service
and run by an SDK harness (here in this process: LOOPBACK), as on Flink, Spark or Dataflow. So
our DoFns (the Arrow ExampleGen's among them) are shown to pickle and run outside Beam's
in-memory runner.
"""

import os
import re
import sys

import pytest
import tensorflow as tf

# The run itself is `portable_run` (tests/conftest.py): tests/test_same_input.py holds its model
# to one device's too.


@pytest.mark.slow
def test_the_pipeline_runs_on_the_portable_runner(portable_run):
    result, run = portable_run.result, portable_run
    for node in ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator"):
        assert f"{node:<20} executed" in result.stdout, result.stdout
    # Each Beam component's pipeline went through the portable runner's job service.
    log = run.beam_log
    assert len(log.read_text().splitlines()) >= 4, log.read_text()
    # LOOPBACK: the workers are this process, so no executor packaged TFX for them
    # (components/compat/beam.py, `workers_are_here`).
    logs = result.stdout + result.stderr
    assert "Python dependency for beam" not in logs and "tfx_ephemeral" not in logs
    # Nor a `pip freeze` of this Python staged for workers that are this Python
    # (compat/beam.py, `for_workers_here`); Beam's staging stays in the test's TMPDIR.
    staged = [p.name for p in (run.pipeline_root.parent / "tmp").rglob("*") if p.is_file()]
    assert "submission_environment_dependencies.txt" not in staged, staged
    examples = list((run.pipeline_root / "CsvExampleGen" / "examples").glob("*/Split-*/*.gz"))
    assert {p.parent.name for p in examples} == {"Split-train", "Split-eval"}
    rows = sum(1 for p in examples for _ in tf.data.TFRecordDataset(str(p), "GZIP"))
    assert rows == 344
    assert run.pushed_versions(), result.stdout


@pytest.mark.slow
def test_pipeline_trains_on_8_emulated_replicas(portable_run):
    """trainer.emulate_replicas = 8 in a real run: 8 replicas in sync, global batch 8 x 8."""
    result, run = portable_run.result, portable_run
    log = result.stdout + result.stderr
    assert re.search(r"num_replicas_in_sync=8", log)
    assert "global batch          64  (= 8 x 8)" in log
    assert "Blessed: yes" in result.stdout and len(run.pushed_versions()) == 1


def test_the_image_entrypoint_hands_a_beam_worker_to_beams_boot(tmp_path, monkeypatch):
    """Dataflow (or a DOCKER environment) starts the image with its ENTRYPOINT and Beam's worker
    flags; the entrypoint hands those to Beam's boot program, a KFP task never reaches it."""
    from components import entrypoint

    args = ["--id=1-1", "--provision_endpoint=localhost:5000", "--logging_endpoint=x"]
    boot = tmp_path / "boot"
    monkeypatch.setattr(entrypoint, "BEAM_BOOT", str(boot))
    monkeypatch.setattr(sys, "argv", ["entrypoint", *args])
    with pytest.raises(SystemExit, match="is not in this image"):
        entrypoint.main()
    boot.write_text("")
    calls = []
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append((path, argv)))
    entrypoint.main()
    assert calls == [(str(boot), [str(boot), *args])]
    assert not entrypoint.beam_worker_args(["--executor_class_path=x", "--json_serialized_x=y"])
