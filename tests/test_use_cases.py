"""The use cases (pipeline/use_cases/) and the run report, in process, in seconds: what a run
decides and says before it starts, the plan for a small and a large slice, a compile to a spec
KFP's SDK loads, a run that finds the lock held, remote data through prepare and the ExampleGen,
and the report a run's outputs make."""

import json
import re
import os
import time
from pathlib import Path

import pytest
import yaml

from pipeline import config as config_lib, errors
from pipeline.use_cases import compiling, local_run, planning, preparing, run_history
from pipeline.reporting import page, run_report


def _config(tmp_path, **settings):
    return config_lib.absolutize(config_lib.load(None, {
        "paths.pipeline_root": str(tmp_path / "root"), "paths.serving_dir": str(tmp_path / "serving"),
        **settings}))


def test_prepare_reads_the_bundled_data_once_and_decides_before_anything_runs(tmp_path):
    prepared = preparing.prepare(_config(tmp_path))
    assert prepared.data.rows == 344 and prepared.decisions.task == "classification"
    lines = prepared.lines()
    assert lines[0].startswith("lockstep: 344 rows from 1 CSV file(s), label 'species', ")
    assert "task classification (" in lines[0]
    assert lines[1].startswith("lockstep: split by row position (never by the label), seed 0, "
                               "train 4 : eval 1 buckets: train ")
    assert lines[3].startswith("lockstep: skew between train and eval: no column past both "
                               "bounds (data.max_skew 0.1 and 4x what a random split of these "
                               "sizes gives); largest species (L-inf ")
    assert prepared.skew.rows["train"] + prepared.skew.rows["eval"] == 344
    assert lines[-1].startswith("lockstep: a model is blessed with ")
    # 0.4419 is Adelie's share of all 344 rows, not of the eval split's: the line says so.
    assert "accuracy at least 0.4519 (0.4419 for always 'Adelie')" in lines[-1]
    assert lines[-1].endswith(" on the eval split (gating metric accuracy; each naive figure in "
                              "brackets is measured on the whole table, before the split)")
    # Not in spans: no drift to measure, and nothing is ever "nothing new".
    assert preparing.check_drift(prepared).drift is None
    assert preparing.nothing_new(prepared) is None
    assert not (tmp_path / "root").exists()  # preparing writes nothing


def test_the_skew_line_names_both_bounds_and_its_advice_fits_the_split():
    from components import row_split
    from pipeline import split_check

    near = split_check.Skew("island", "L-inf", 0.130, 0.060, 0.1, "Biscoe")
    assert not near.beyond  # past data.max_skew, not past 4x chance: no stop, and it says why
    assert near.words() == ("island (L-inf 0.130 at 'Biscoe'; past 0.1 but within 4x the 0.060 "
                            "a random split gives)")
    rule = row_split.SplitRule((4, 1), (), 0)
    check = split_check.SkewCheck(rule.to_dict(), rule.words(), {"train": 80, "eval": 20},
                                  {}, (near,), 0.1)
    split_check.refuse_beyond(check)
    assert check.lines()[2] == (
        "lockstep: skew between train and eval: no column past both bounds (data.max_skew 0.1 and "
        "4x what a random split of these sizes gives); largest " + near.words())
    far = split_check.Skew("island", "L-inf", 0.330, 0.060, 0.1, "Biscoe")
    for by, advice in (((), "set data.split_by to a column that groups related rows"),
                       (("user",), "data.split_by is ['user']: too few groups")):
        rule = row_split.SplitRule((4, 1), by, 0)
        check = split_check.SkewCheck(rule.to_dict(), rule.words(), {"train": 80, "eval": 20},
                                      {}, (far,), 0.1)
        with pytest.raises(split_check.SkewError) as err:
            split_check.refuse_beyond(check)
        assert str(err.value).startswith(
            "the train and eval rows differ past both bounds (data.max_skew 0.1 and 4x what a "
            "random split of these sizes gives): island (L-inf 0.330 at 'Biscoe'; past 0.1 and "
            "4x the 0.060 a random split gives)")
        assert advice in str(err.value) and str(err.value).endswith(
            ", or data.max_skew = 0 to skip)")
        assert ("set data.split_by" in str(err.value)) == (not by)


def test_a_bad_label_is_refused_by_prepare_with_the_column_named(tmp_path):
    with pytest.raises(Exception) as err:
        preparing.prepare(_config(tmp_path, **{"data.label": "beak"}))
    assert errors.status_of(err.value) == errors.INPUT
    assert "label column 'beak' is not in the header" in str(err.value)


def test_the_plan_of_a_larger_slice_keeps_the_per_core_batch_and_the_examples(tmp_path):
    config = _config(tmp_path)
    sizes = planning.sizes_for(config, ["v5e-4", "v5e-16"])
    assert [(s.replicas, s.on_tpu) for s in sizes] == [(4, True), (16, True)]
    rows, where = planning.train_rows(config)
    assert where.startswith("Training rows: about ") and 0 < rows < 344
    (_, small), (_, large) = planning.plans_for(config, sizes, rows)
    assert small.per_replica_batch == large.per_replica_batch
    assert large.global_batch == 4 * small.global_batch
    assert abs(large.train_steps * large.global_batch - small.train_steps * small.global_batch) \
        <= large.global_batch
    assert large.learning_rate > small.learning_rate
    with pytest.raises(config_lib.ConfigError, match="replicas must be at least 1"):
        planning.sizes_for(config, replicas=0)
    # The use case `lockstep plan` calls: the rehearsed size last; a size that cannot rehearse
    # it is named, so the command can name its flag.
    planned = planning.plan(config, slices=["v5e-4"], like="v5e-16")
    assert [label for label, _ in planned.plans] == ["v5e-4", "v5e-16"]
    assert planned.rows_line == where
    with pytest.raises(planning.SizeError, match="cannot reproduce the global batch") as refused:
        planning.plan(config, slices=["v5e-8"], like="v4-8")
    assert (refused.value.which, refused.value.name) == ("like", "v4-8")
    with pytest.raises(planning.SizeError, match="unknown TPU slice 'v5e-3'") as refused:
        planning.plan(config, slices=["v5e-3"])
    assert (refused.value.which, refused.value.name) == ("slice", "")


def test_compile_writes_a_spec_that_kfp_loads_and_nothing_else(tmp_path, monkeypatch):
    from kfp import components
    from pipeline.kubeflow import import_stubs

    # This process has TensorFlow loaded: the stand-ins would refuse anyway; say so explicitly.
    monkeypatch.setenv(import_stubs.DISABLE_ENV, "1")
    config = config_lib.load(None, {"data.path": "gs://bucket/data", "data.task": "classification",
                                    "paths.pipeline_root": "gs://bucket/root",
                                    "paths.serving_dir": "gs://bucket/serving",
                                    "trainer.tpu_slice": "v5e-4", "eval.bounds": {"accuracy": 0.8}})
    out = tmp_path / "spec" / "pipeline.yaml"
    result = compiling.compile_spec(config, str(out))
    assert not result.fallback and result.output == str(out)
    assert [p.name for p in out.parent.iterdir()] == ["pipeline.yaml"]  # no temp file left
    spec, platform = yaml.safe_load_all(out.read_text())
    assert set(spec["root"]["dag"]["tasks"]) == set(result.compiled.pipeline_spec.root.dag.tasks)
    assert "Trainer" in spec["root"]["dag"]["tasks"] and "kubernetes" in platform["platforms"]
    assert components.load_component_from_file(str(out)).name  # KFP's SDK loads it


def test_a_run_that_finds_the_lock_held_runs_nothing(tmp_path):
    """The run use case says what it decided through `say`, in order, before it takes the lock;
    where the library logs go only once it holds it (a run refused keeps no log file)."""
    from pipeline.local import run_lock

    config = _config(tmp_path)
    lock, log = str(tmp_path / "run.lock"), str(tmp_path / "run.log")
    said = []
    with run_lock.hold(lock):
        with pytest.raises(run_lock.Locked) as err:
            local_run.run(config, lock=lock, log_file=log, say=said.append)
    assert errors.status_of(err.value) == errors.LOCKED
    assert not (tmp_path / "root").exists() and not (tmp_path / "serving").exists()
    assert said == preparing.prepare(config).lines()
    assert not any("library logs" in line for line in said) and not os.path.exists(log)
    with pytest.raises(config_lib.ConfigError, match="orchestrator must be one of local, kfp-local"):
        local_run.run(config, orchestrator="airflow")


def test_each_run_has_a_log_file_of_its_own_named_in_the_order_the_runs_began(tmp_path):
    """Two runs that begin within a second (a run stopped, then run again at once) write two
    logs: named to the second, the second run wrote on in the first's (a test that waits for a
    line in the log found the first run's)."""
    config = _config(tmp_path)
    names = []
    for _ in range(3):
        names.append(local_run.log_path(config))
        time.sleep(0.001)
    assert len(set(names)) == 3 and names == sorted(names)
    assert all(re.fullmatch(rf"{tmp_path}/root/logs/run-\d{{8}}T\d{{6}}\.\d{{6}}Z-{os.getpid()}"
                            r"\.log", name) for name in names), names


def _outputs(tmp_path) -> dict:
    from components import pusher
    from components.csv_example_gen import SPANS_KEY
    from pipeline import definition, evaluation
    from trainer_module.summary import SUMMARY_FILE

    model_run = tmp_path / "model_run"
    model_run.mkdir()
    (model_run / SUMMARY_FILE).write_text(json.dumps({
        "strategy": "MirroredStrategy", "replicas": 2,
        "plan": {"train_steps": 40, "global_batch": 64, "budget": "2 epochs",
                 "warnings": ["trainer.jit_compile not used: XLA on CPU cannot compile 16-bit "
                              "dots (a TPU or GPU compiles this step)"]}}))
    gate = evaluation.Gate("classification", "accuracy",
                           (evaluation.Bound("accuracy", 0.5, 0.4, "always 'a'", False),))
    Output = run_report.Output
    return {
        definition.EXAMPLE_GEN_NODE: [Output("examples", str(tmp_path / "ex"), {SPANS_KEY: "3,4"})],
        definition.TRAINER_NODE: [Output("model_run", str(model_run), {})],
        definition.PUSHER_NODE: [Output("pushed_model", str(tmp_path / "pushed"), {
            pusher.GATE_KEY: json.dumps(gate.to_dict()), pusher.PUSHED_KEY: 1,
            pusher.DESTINATION_KEY: "/serving/7", pusher.NOTE_KEY: "pushed as version 7"})],
    }


def test_the_run_report_says_what_the_outputs_hold_and_its_page_shows_it(tmp_path):
    nodes = [run_report.NodeReport("Trainer", "executed", 12.5),
             run_report.NodeReport("Pusher", "executed", 1.5)]
    report = run_report.build(nodes, _outputs(tmp_path))
    report.metrics = {"accuracy": 0.93, "precision": float("nan"), "recall": 0.0}
    report.blessed = True
    text = report.describe()
    assert "Data: span 3, 4" in text
    # A binary model that predicts no positive row: its precision is undefined, not "nan".
    assert ("Eval metrics: accuracy 0.9300, precision n/a (no row predicted positive), "
            "recall 0.0000") in text
    assert ("Trainer: MirroredStrategy on 2 replica(s), 40 steps of global batch 64 (2 epochs)\n"
            "Warning: trainer.jit_compile not used: XLA on CPU cannot compile 16-bit dots (a TPU "
            "or GPU compiles this step)") in text  # the plan's warnings, under its line
    assert text.endswith("Blessed: yes\nModel pushed to: /serving/7")
    assert report.gate.metric == "accuracy"
    html = page.render(report)
    assert "0.93" in html and "/serving/7" in html and "n/a (no row predicted positive)" in html
    assert ">nan<" not in html and "<svg" not in html.split("<body", 1)[0]


def test_a_page_that_cannot_be_written_is_an_error_and_leaves_nothing(tmp_path, monkeypatch):
    report = run_report.build([run_report.NodeReport("Trainer", "executed", 1.0)],
                              _outputs(tmp_path))
    config = _config(tmp_path)
    # A page that fails half-way through its write: UTF-8 cannot encode a lone surrogate.
    monkeypatch.setattr(page, "render", lambda *args: "<html>" + "x" * 100_000 + "\udc80")
    directory = tmp_path / "reports"
    path, error = run_history.write_page(report, config, history=[], directory=str(directory))
    assert path is None and error.startswith("UnicodeEncodeError: "), error
    assert list(directory.iterdir()) == []  # no page, no temporary file
    monkeypatch.undo()
    path, error = run_history.write_page(report, config, history=[], directory=str(directory))
    assert error is None and [p.name for p in directory.iterdir()] == [os.path.basename(path)]


def test_kfp_local_is_bridged_only_while_a_run_lasts():
    """pipeline/local/kfp_local.py rebinds kfp.local's names (components/compat/kfp.py) for a run;
    afterwards, and after a run that raised, kfp.local is as it was (other code in the process sees
    stock KFP)."""
    import importlib

    from components.compat import kfp as kfp_compat
    from pipeline.local import kfp_local

    patched = [(importlib.import_module(s.module), s.name) for s in kfp_compat.SYMBOLS]
    stock = [getattr(module, name) for module, name in patched]
    with pytest.raises(RuntimeError, match="a task went wrong"):
        with kfp_local.bridged():
            assert all(getattr(m, n) is not s for (m, n), s in zip(patched, stock))
            raise RuntimeError("a task went wrong")
    assert [getattr(module, name) for module, name in patched] == stock


def test_the_console_shows_components_and_progress_and_logs_everything_else(tmp_path, capfd):
    """pipeline/local/console.py in process: component lines and the Trainer's progress on the
    terminal, what C++ writes to fd 2 in the run's log, the process's file descriptors as they
    were afterwards. (Under pytest, sys.stdout and the root logger are pytest's, so prints and
    library logs are not checked here.)"""
    import dataclasses
    import logging

    from pipeline.local.console import Console
    from runtime.progress import PROGRESS_LOGGER, Progress

    log = tmp_path / "logs" / "run.log"
    with Console(str(log)):
        os.write(2, b"C++ chatter straight to fd 2\n")
        tfx = logging.getLogger("tfx.orchestration")
        tfx.info("Component Trainer is running.")
        logging.getLogger(PROGRESS_LOGGER).info("step", extra={"progress": dataclasses.asdict(
            Progress(step=40, total=40, loss=0.25, examples_per_sec=1234.0, eta=0.0))})
        tfx.info("Component Trainer is finished.")
    os.write(1, b"after the run\n")
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert lines[0] == "  Trainer              step 40/40  loss 0.2500  1,234 examples/s  ETA 0s"
    assert re.fullmatch(r"  Trainer +executed +\d+\.\ds", lines[1]), lines
    assert lines[2:] == ["after the run"] and err == ""
    logged = log.read_text()
    assert "C++ chatter straight to fd 2" in logged


def test_the_pipeline_up_to_a_node_is_that_node_and_what_it_needs(tmp_path):
    """`lockstep verify` runs up to Transform: the ExampleGen (records and their types-only
    schema) and Transform, not the validation branch it no longer waits for."""
    from pipeline import definition

    prepared = preparing.prepare(_config(tmp_path))
    input_base, pattern = prepared.source
    assert (input_base, pattern) == (prepared.data.input_base, prepared.data.pattern)

    def ids(to_node):
        built = definition.create_pipeline(prepared.config, input_base, pattern,
                                             prepared.decisions, to_node=to_node)
        return [c.id for c in built.components]

    assert ids(definition.TRANSFORM_NODE) == [definition.EXAMPLE_GEN_NODE,
                                                definition.TRANSFORM_NODE]
    # The Trainer needs the validator too (it gates training), and the schema SchemaGen made.
    assert set(ids(definition.TRAINER_NODE)) == set(ids(None)) - {
        definition.EVALUATOR_NODE, definition.PUSHER_NODE, definition.BASELINE_NODE,
        definition.REFERENCE_NODE}
    assert len(ids(None)) == 10


def test_remote_data_goes_through_prepare_and_the_local_run(tmp_path, monkeypatch):
    """Data on an object store: prepare reads none of it (the task and the gate come from the
    config) and the local run's ExampleGen reads the CSVs from there, every row. TensorFlow's
    ram:// file system stands in for the store: TFX's fileio hands a scheme it has no plugin of
    its own for to its TensorFlow one (tf.io.gfile, which serves gs:// and s3:// too), so
    components/fs.py and the ExampleGen read it as they would a bucket. It lives in this
    process's memory: the run here has no second lane (a worker process would find ram://
    empty), and it stops after the ExampleGen, as verify stops after Transform."""
    import gzip

    from components import fs
    from pipeline import definition
    from pipeline.local import node_worker, run_lock
    from pipeline.orchestrators import local_dag
    from pipeline.local.console import Console

    bundled = config_lib.BUNDLED_DATA / "penguins.csv"
    base = f"ram://lockstep-{tmp_path.name}/data"  # a directory of CSV files, as the bundled
    fs.makedirs(base)
    with fs.fileio().open(f"{base}/penguins.csv", "wb") as handle:
        handle.write(bundled.read_bytes())
    # Unread data has no naive baselines to set the gate: it is the config's.
    config = _config(tmp_path, **{"data.path": base, "data.task": "classification",
                                  "eval.bounds": {"accuracy": 0.8}})

    prepared = preparing.prepare(config)
    assert prepared.data is None and prepared.skew is None
    assert prepared.source == (base, "*.csv")
    assert prepared.lines()[0] == (
        f"lockstep: data {base} is remote: not checked before the run (the ExampleGen "
        "reads it), label 'species'; task classification (set by --task or data.task)")
    assert not (tmp_path / "root").exists()  # preparing writes nothing
    # The run use case takes it as far as the lock (held here): nothing reads data.input_base.
    lock, said = str(tmp_path / "run.lock"), []
    with run_lock.hold(lock), pytest.raises(run_lock.Locked):
        local_run.run(config, lock=lock, log_file=str(tmp_path / "run.log"), say=said.append)
    assert said[0] == prepared.lines()[0]

    monkeypatch.setattr(node_worker, "cores", lambda: 1)
    with Console(str(tmp_path / "run.log")) as console:
        report = local_dag.run_dag(prepared, console, to_node=definition.EXAMPLE_GEN_NODE)
    assert [(n.node, n.state) for n in report.nodes] == [(definition.EXAMPLE_GEN_NODE,
                                                          "executed")]
    assert report.data == base
    examples = Path(report.artifacts[f"{definition.EXAMPLE_GEN_NODE}.examples"])
    assert examples.is_relative_to(tmp_path / "root")

    def records(split):
        count = 0
        for path in examples.glob(f"Split-{split}/*.gz"):
            data = gzip.decompress(path.read_bytes())
            while data:  # TFRecord: length (8 bytes), its CRC (4), the record, its CRC (4)
                length = int.from_bytes(data[:8], "little")
                data, count = data[16 + length:], count + 1
        return count

    rows = len(bundled.read_text().strip().splitlines()) - 1  # no quoted line breaks in it
    assert rows == 344 and records("train") + records("eval") == rows
    assert records("train") > records("eval") > 0
