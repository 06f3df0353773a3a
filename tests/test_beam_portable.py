"""The pipeline's Beam components run on Beam's portable runner, not only in memory.

`beam_args` goes unchanged to every Beam component (CsvExampleGen, StatisticsGen, Transform,
Evaluator). With the portable runner, each transform is pickled, sent through the job service
and run by an SDK harness (here in this process: LOOPBACK), as on Flink, Spark or Dataflow. So
our DoFns (the Arrow ExampleGen's among them) are shown to pickle and run outside Beam's
in-memory runner.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

from conftest import LOCKSTEP, REPO, PipelineRun


PORTABLE = ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]


# Loaded by the run's Python process (sitecustomize): records each Beam pipeline the portable
# runner runs, so the test sees which runner ran them, not only that the run succeeded.
HOOK = textwrap.dedent("""
    import os
    from apache_beam.runners.portability import portable_runner

    _run = portable_runner.PortableRunner.run_pipeline

    def run_pipeline(self, pipeline, options):
        stages = [t.full_label for t in pipeline.transforms_stack[0].parts]
        with open(os.environ["LOCKSTEP_BEAM_LOG"], "a") as log:
            log.write(stages[0].split("/")[0] + "\\n" if stages else "?\\n")
        return _run(self, pipeline, options)

    portable_runner.PortableRunner.run_pipeline = run_pipeline
""")


@pytest.mark.slow
def test_the_pipeline_runs_on_the_portable_runner(tmp_path):
    config = tmp_path / "portable.toml"
    config.write_text("beam_args = [" + ", ".join(f'"{a}"' for a in PORTABLE) + "]\n")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    log = tmp_path / "beam.log"
    run = PipelineRun(tmp_path)
    env = dict(os.environ, PYTHONPATH=f"{hook}:{REPO}", LOCKSTEP_BEAM_LOG=str(log))
    result = subprocess.run(
        LOCKSTEP + ["run", "--config", str(config), "--pipeline-root", str(run.pipeline_root),
                    "--serving-dir", str(run.serving_dir)],
        cwd=tmp_path, env=env, text=True, capture_output=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for node in ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator"):
        assert f"{node:<20} executed" in result.stdout, result.stdout
    # Each Beam component's pipeline went through the portable runner's job service.
    assert len(log.read_text().splitlines()) >= 4, log.read_text()
    examples = list((run.pipeline_root / "CsvExampleGen" / "examples").glob("*/Split-*/*.gz"))
    assert {p.parent.name for p in examples} == {"Split-train", "Split-eval"}
    rows = sum(1 for p in examples for _ in tf.data.TFRecordDataset(str(p), "GZIP"))
    assert rows == 344
    assert run.pushed_versions(), result.stdout


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
