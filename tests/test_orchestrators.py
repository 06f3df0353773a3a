"""One seam per orchestrator (pipeline/orchestrators/): a target is one object registered by
name; `lockstep run` and the run history take it from the registry, and the definition takes
its Binding, never its name. The toy target here is TFX's own stock LocalDagRunner, added by
this module alone (one class, one `register` line)."""

from __future__ import annotations

import pytest

from pipeline import config as config_lib, orchestrators
from pipeline.binding import COMPILED, HERE
from pipeline.config import ConfigError
from pipeline.node_ids import BASELINE_NODE, EXAMPLE_GEN_NODE, SCHEMA_NODE, STATISTICS_NODE


class StockLocalDagRunner:
    """TFX's own LocalDagRunner, one node after another, up to SchemaGen (a toy: enough to
    show a whole target through the seam)."""

    name = "stock-tfx"
    help = "TFX's stock LocalDagRunner, up to SchemaGen"
    binding = HERE
    never_cached = (BASELINE_NODE,)
    compile = None
    past_runs = None  # its runs are in the same ML Metadata as the local runner's

    def __init__(self):
        self.runs = 0

    def run(self, prepared, console):
        from tfx.orchestration.local.local_dag_runner import LocalDagRunner

        from pipeline import definition
        from pipeline.reporting import metadata_store

        input_base, pattern = prepared.source
        tfx_pipeline = definition.create_pipeline(
            prepared.config, input_base, pattern, prepared.decisions, binding=self.binding,
            to_node=SCHEMA_NODE)
        console.line("toy: TFX's LocalDagRunner")
        LocalDagRunner().run(tfx_pipeline)
        self.runs += 1
        return metadata_store.report(prepared.config)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(orchestrators, "_registered", dict(orchestrators._registered))
    return orchestrators.register(StockLocalDagRunner())


def test_a_registered_target_is_a_choice_of_lockstep_run_and_the_compile_only_one_is_not(toy):
    from pipeline.cli import build_parser  # builds the parsers from the registry

    assert orchestrators.names() == ["local", "kfp-local", "kubeflow", "stock-tfx"]
    assert orchestrators.names(runs_here=True) == ["local", "kfp-local", "stock-tfx"]
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    (option,) = [a for a in run._actions if "--orchestrator" in a.option_strings]
    assert option.choices == ["local", "kfp-local", "stock-tfx"] and option.default == "local"
    assert "stock-tfx: TFX's stock LocalDagRunner, up to SchemaGen" in option.help


def test_an_unknown_or_compile_only_orchestrator_is_one_line_naming_the_choices(tmp_path):
    from pipeline.use_cases import local_run

    config = config_lib.absolutize(config_lib.load(None, {
        "paths.pipeline_root": str(tmp_path / "root"), "paths.serving_dir": str(tmp_path / "s")}))
    with pytest.raises(ConfigError, match=r"orchestrator must be one of local, kfp-local, "
                                          r"kubeflow, got 'airflow'"):
        local_run.run(config, orchestrator="airflow")
    with pytest.raises(ConfigError, match=r"orchestrator 'kubeflow' does not run here: "
                                          r"`lockstep submit` sends its spec to a cluster"):
        local_run.run(config, orchestrator="kubeflow")
    assert not (tmp_path / "root").exists()  # refused before anything was written


def test_each_targets_binding_and_cache_rule():
    local, kfp_local, kubeflow = (orchestrators.get(n) for n in ("local", "kfp-local", "kubeflow"))
    assert local.binding == HERE and local.never_cached == (BASELINE_NODE,)
    # kfp-local runs the Kubeflow spec: the same binding and cache rule (no ExampleGen driver).
    assert kfp_local.binding == kubeflow.binding == COMPILED
    assert kfp_local.never_cached == kubeflow.never_cached == (EXAMPLE_GEN_NODE, BASELINE_NODE)
    assert kubeflow.run is None and kubeflow.past_runs is None and local.compile is None


@pytest.mark.slow
def test_a_toy_target_added_by_one_registration_runs_the_pipeline_through_the_use_case(
        toy, tmp_path):
    from pipeline.use_cases import local_run, run_history

    config = config_lib.absolutize(config_lib.load(None, {
        "paths.pipeline_root": str(tmp_path / "root"), "paths.serving_dir": str(tmp_path / "s")}))
    said = []
    outcome = local_run.run(config, orchestrator="stock-tfx", say=said.append,
                            log_file=str(tmp_path / "run.log"))
    assert toy.runs == 1
    assert [(n.node, n.state) for n in outcome.report.nodes] == [
        (EXAMPLE_GEN_NODE, "executed"), (STATISTICS_NODE, "executed"), (SCHEMA_NODE, "executed")]
    assert outcome.page and outcome.page.endswith(".html")  # the use case's own page, as any run
    # The run history reads it through the local target (the same ML Metadata), once.
    (past,) = run_history.past_runs(config, 10)
    assert past.run_id == outcome.report.run_id
