"""`lockstep compile`: a KFP v2 spec that open-source KFP on GKE runs, checked with kfp's protos."""

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2
from kfp.pipeline_spec import pipeline_spec_pb2

from conftest import REPO, cli, lockstep
from pipeline import config as config_lib, orchestrators

TPU_SELECTOR = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2"}


def _load(path):
    spec_doc, platform_doc = list(yaml.safe_load_all(path.read_text()))
    # Strict parses: an unknown field anywhere is an error.
    spec = json_format.ParseDict(spec_doc, pipeline_spec_pb2.PipelineSpec())
    platform = json_format.ParseDict(platform_doc, pipeline_spec_pb2.PlatformSpec())
    return spec, platform


def _executors(spec):
    return json_format.MessageToDict(spec.deployment_spec)["executors"]


def test_spec_parses_has_no_resolver_and_puts_only_the_trainer_on_tpu(compiled):
    spec, platform = _load(compiled["output"])
    assert set(spec.root.dag.tasks) == {
        "CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "Transform",
        "LatestPushedModel", "Trainer", "GradientBoosting", "Evaluator", "Pusher"}
    # The gradient-boosting reference fits validated data, beside Transform and the Trainer.
    assert set(spec.root.dag.tasks["GradientBoosting"].dependent_tasks) == {
        "CsvExampleGen", "ExampleValidator"}
    executors = _executors(spec)
    assert not [label for label, e in executors.items() if "resolver" in e]
    trainer_label = spec.components["Trainer"].executor_label
    for label, executor in executors.items():
        container = executor["container"]
        assert container["image"] == "lockstep-pipeline:0.1.0"
        resources = container["resources"]
        if label == trainer_label:
            assert resources["accelerator"]["resourceType"] == "google.com/tpu"
            assert resources["accelerator"]["resourceCount"] == "4"
            assert resources["resourceCpuLimit"] == "4" and resources["resourceMemoryLimit"] == "16G"
        else:
            assert "accelerator" not in resources and resources["resourceCpuLimit"] == "1"
    k8s = platform.platforms["kubernetes"].deployment_spec.executors
    assert list(k8s) == [trainer_label]  # the other tasks stay on CPU nodes
    trainer_k8s = json_format.ParseDict(json_format.MessageToDict(k8s[trainer_label]),
                                        k8s_pb2.KubernetesExecutorConfig())
    assert dict(trainer_k8s.node_selector.labels) == TPU_SELECTOR
    assert trainer_k8s.tolerations[0].key == "google.com/tpu"


def test_beam_args_reach_every_beam_component(compiled):
    spec, _ = _load(compiled["output"])
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    with_args = {name for name, executor in executors.items()
                 if "--runner=DataflowRunner" in " ".join(executor["container"].get("args", []))}
    assert with_args >= {"CsvExampleGen_executor", "StatisticsGen_executor",
                         "Transform_executor", "Evaluator_executor"}, sorted(executors)


def test_spec_caching_parameters_and_root(compiled):
    spec, _ = _load(compiled["output"])
    cache = {name: task.caching_options.enable_cache for name, task in spec.root.dag.tasks.items()}
    # A new span under the same data root must re-run ingestion; the baseline is looked up anew.
    assert cache.pop("CsvExampleGen") is False and cache.pop("LatestPushedModel") is False
    assert all(cache.values())
    params = {name: json_format.MessageToDict(p.default_value)
              for name, p in spec.root.input_definitions.parameters.items()}
    assert params == {"data_root": "gs://lockstep-test/data", "train_steps": 0, "epochs": 40.0,
                      "train_examples": 0, "per_replica_batch": 128,
                      "base_learning_rate": 0.004, "accumulation_steps": 1}
    assert spec.root.dag.tasks["Trainer"].inputs.parameters[
        "train_steps"].component_input_parameter == "train_steps"
    assert spec.default_pipeline_root == str(compiled["root"] / "pipeline_root")
    # Compiling wrote nothing at the pipeline root, and nothing but the spec.
    assert not (compiled["root"] / "pipeline_root").exists()
    assert sorted(p.name for p in compiled["output"].parent.iterdir()) == ["pipeline.yaml"]
    assert "Trainer on v5e-4" in compiled["result"].stdout


def test_gpu_trainer_and_multi_host_slice(tmp_path):
    from pipeline import preflight

    config = config_lib.load(None, {"kubeflow.gpus": 2, "kubeflow.gpu_type": "nvidia-tesla-t4",
                                    "data.path": "gs://b/d", "paths.pipeline_root": "gs://b/r",
                                    "data.task": "classification",
                                    "eval.bounds": {"accuracy": 0.8}})
    compiled = orchestrators.get("kubeflow").compile(config, preflight.decide(config), "img:1")
    label = compiled.pipeline_spec.components["Trainer"].executor_label
    accelerator = _executors(compiled.pipeline_spec)[label]["container"]["resources"]["accelerator"]
    assert (accelerator["resourceType"], accelerator["resourceCount"]) == ("nvidia.com/gpu", "2")
    k8s = json_format.MessageToDict(
        compiled.platform_spec.platforms["kubernetes"].deployment_spec.executors[label])
    assert k8s["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}

    # A multi-host slice's Trainer waits for a Vertex AI job on a CPU node (tests/
    # test_vertex_training.py): no accelerator, no node selector.
    multi = dataclasses.replace(config, trainer=dataclasses.replace(config.trainer,
                                                                    tpu_slice="v5e-16"))
    compiled = orchestrators.get("kubeflow").compile(multi, preflight.decide(multi), "img:1")
    label = compiled.pipeline_spec.components["Trainer"].executor_label
    assert "accelerator" not in _executors(compiled.pipeline_spec)[label]["container"]["resources"]


def test_compile_errors_are_one_line(tmp_path):
    remote = cli("compile", "--data", "gs://b/d", "--output", tmp_path / "p.yaml")
    assert remote.returncode == 2
    assert remote.stderr.strip() == ("lockstep: error: data.path gs://b/d is remote and compile "
                                     "reads no remote data: set data.task to classification or "
                                     "regression")
    bad = cli("compile", "--slice", "v5e-3", "--output", tmp_path / "p.yaml")
    assert bad.returncode == 2 and "unknown TPU slice 'v5e-3'" in bad.stderr
    assert not (tmp_path / "p.yaml").exists()


def test_compile_writes_nothing_but_the_spec(tmp_path, monkeypatch):
    """No probe file in the default runs/ directories (or their nearest parent): a compile runs
    nothing here. A run's preparation, on the same config, does probe them."""
    from components import fs
    from pipeline.use_cases import compiling, preparing

    probed = []
    monkeypatch.setattr(fs, "probe", probed.append)
    monkeypatch.chdir(tmp_path)
    config = config_lib.absolutize(config_lib.load(None))  # runs/pipeline_root, runs/serving
    assert config.paths.pipeline_root.startswith(str(tmp_path))
    done = compiling.compile_spec(config, str(tmp_path / "p.yaml"))
    assert done.compiled is not None and probed == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]
    preparing.prepare(config)
    assert probed == [str(tmp_path)] * 2  # the nearest existing parent of each place


REGRESSION_GPU = (
    '[data]\npath = "gs://b/data"\nlabel = "body_mass_g"\ntask = "regression"\n'
    'span_pattern = "day={SPAN}/part-*.csv"\nspan_window = 3\n[trainer]\nwarm_start = true\n'
    'global_batch = 256\nhidden_units = [64, 32]\n[eval]\nbounds = {rmse = 400.0}\n'
    '[paths]\npipeline_root = "gs://b/root"\nserving_dir = "gs://b/serving"\n'
    '[kubeflow]\ngpus = 1\ngpu_type = "nvidia-l4"\nimage = "r/lockstep"\nimage_tag = "dev"\n')


def test_compiling_with_import_stand_ins_gives_the_same_spec(compiled, tmp_path):
    """`lockstep compile` replaces TensorFlow & co. by stand-ins (pipeline/kubeflow/import_stubs.py): its
    output must be byte-identical to a compile with the real packages (this process has them)."""
    from pipeline import preflight

    other = tmp_path / "regression.toml"
    other.write_text(REGRESSION_GPU)
    result = lockstep("compile", "--config", other, "--output", tmp_path / "r.yaml")
    assert result.returncode == 0, result.stderr
    for config_file, output, overrides in (
            (compiled["config"], compiled["output"],
             {"paths.pipeline_root": str(compiled["root"] / "pipeline_root")}),
            (other, tmp_path / "r.yaml", {})):
        config = config_lib.absolutize(config_lib.load(config_file, overrides))
        real = orchestrators.get("kubeflow").compile(config, preflight.decide(config))
        assert output.read_text() == real.to_yaml()


@pytest.mark.slow
def test_compile_falls_back_to_real_imports(tmp_path, monkeypatch, capsys):
    """If compiling with the stand-ins fails, compile runs again in a fresh process for real."""
    from pipeline import cli
    from pipeline.kubeflow import import_stubs
    from pipeline.kubeflow import compiler

    def broken(*args, **kwargs):
        raise RuntimeError("a stand-in was called")

    monkeypatch.setattr(import_stubs, "install", lambda: True)
    monkeypatch.setattr(compiler, "compile_pipeline", broken)
    monkeypatch.setenv("PYTHONPATH", str(config_lib.REPO_ROOT))
    config = tmp_path / "c.toml"
    config.write_text(REGRESSION_GPU)
    assert cli.main(["compile", "--config", str(config), "--output", str(tmp_path / "p.yaml")]) == 0
    assert ("compiling with import stand-ins failed (RuntimeError: a stand-in was called); "
            "compiling again with the real imports") in capsys.readouterr().err
    spec, _ = _load(tmp_path / "p.yaml")
    assert "Trainer" in spec.root.dag.tasks


def _variants() -> dict[str, str]:
    """Config text for every Trainer placement compile takes: CPU, GPU, each single-host slice."""
    from trainer_module import slices

    base = ('[data]\npath = "gs://b/data"\ntask = "classification"\n'
            '[eval]\nbounds = {accuracy = 0.8}\n[paths]\npipeline_root = "gs://b/root"\nserving_dir = "gs://b/serving"\n')
    # The GPU variant also gates on the gradient-boosting reference (eval.beat_reference).
    variants = {"cpu": base, "gpu": base.replace("[eval]\n", "[eval]\nbeat_reference = true\n")
                + '[kubeflow]\ngpus = 2\ngpu_type = "nvidia-l4"\n'}
    for name, tpu in slices.PRESETS.items():
        if tpu.single_host:
            variants[name] = base + f'[trainer]\ntpu_slice = "{name}"\n'
    return variants


@pytest.mark.slow
def test_every_variant_loads_in_kfp_and_stand_ins_compile_it_identically(tmp_path):
    """Schema 2.1 for CPU, GPU and every single-host slice: KFP's own SDK loads each spec, the
    platform spec puts the Trainer (and only the Trainer) where it belongs, and the import
    stand-ins give the same bytes as a compile with the real packages."""
    import subprocess
    import sys

    from kfp import components

    from pipeline import preflight
    from trainer_module import slices

    variants = _variants()
    assert {"cpu", "gpu", "v5e-1", "v5e-4", "v5e-8", "v6e-8", "v4-8", "v5p-8"} <= set(variants)
    pairs = []
    for name, text in variants.items():
        (tmp_path / f"{name}.toml").write_text(text)
        pairs.append((str(tmp_path / f"{name}.toml"), str(tmp_path / f"{name}.yaml")))
    # One fresh process compiles them all with the stand-ins, as `lockstep compile` does.
    script = ("import sys, json; from pipeline import cli; from pipeline.kubeflow import import_stubs\n"
              "assert import_stubs.install()\n"
              "sys.exit(max(cli.main(['compile', '--config', c, '--output', o]) "
              "for c, o in json.loads(sys.argv[1])))")
    result = subprocess.run([sys.executable, "-c", script, json.dumps(pairs)], text=True,
                            capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "compiling again with the real imports" not in result.stderr
    for name, (config_path, output) in zip(variants, pairs):
        text = Path(output).read_text()
        assert text.startswith("pipelineInfo:") and "schemaVersion: 2.1.0" in text, name
        config = config_lib.absolutize(config_lib.load(config_path))
        decisions = preflight.decide(config)
        assert text == orchestrators.get("kubeflow").compile(config, decisions).to_yaml(), name
        loaded = components.load_component_from_file(output)  # KFP's own SDK
        assert loaded.name == "lockstep" and set(loaded.pipeline_spec.root.dag.tasks) == {
            "CsvExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "Transform",
            "LatestPushedModel", "Trainer", "GradientBoosting", "Evaluator", "Pusher"}, name
        spec, platform = _load(Path(output))
        evaluator_inputs = set(spec.root.dag.tasks["Evaluator"].inputs.artifacts)
        assert ("reference" in evaluator_inputs) == (name == "gpu"), (name, evaluator_inputs)
        trainer_label = spec.components["Trainer"].executor_label
        k8s = json_format.MessageToDict(platform)["platforms"]["kubernetes"][
            "deploymentSpec"]["executors"] if name != "cpu" else {}
        assert list(k8s) == ([] if name == "cpu" else [trainer_label]), name
        accelerator = _executors(spec)[trainer_label]["container"]["resources"].get("accelerator")
        if name == "cpu":
            assert accelerator is None
        elif name == "gpu":
            assert k8s[trainer_label]["nodeSelector"]["labels"] == {
                "cloud.google.com/gke-accelerator": "nvidia-l4"}
            assert accelerator["resourceType"] == "nvidia.com/gpu"
        else:
            tpu = slices.get(name)
            assert k8s[trainer_label]["nodeSelector"]["labels"] == tpu.node_selector(), name
            assert accelerator["resourceCount"] == str(tpu.chips_per_host), name
        retry = spec.root.dag.tasks["Trainer"].retry_policy
        assert (retry.max_retry_count, retry.backoff_duration.seconds) == (3, 60), name
        assert not [t for n, t in spec.root.dag.tasks.items()
                    if n != "Trainer" and t.HasField("retry_policy")]
