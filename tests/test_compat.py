"""The wall (components/compat/): every symbol it reaches in a dependency is there in the installed
version (the first check of an upgrade: docs/upgrading.md), each named with the version when it is
not; the wall declares every private name its source uses; its rebinds are undone."""

import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

from components import compat
from components.compat.symbols import Symbol, problem, version
from lint_tool import load_lint

REPO = Path(__file__).resolve().parent.parent
# One module per dependency: the wall's modules that declare SYMBOLS.
WALL = {name: importlib.import_module(f"components.compat.{name}")
        for _, name, _ in pkgutil.iter_modules(compat.__path__)}
WALL = {name: module for name, module in WALL.items() if hasattr(module, "SYMBOLS")}
MPV = "tensorflow_model_analysis.evaluators.metrics_plots_and_validations_evaluator"


def test_one_module_per_dependency():
    assert set(WALL) == {"beam", "cloudpickle", "dill", "kfp", "tfma", "tft", "tfx", "tfx_bsl"}
    for name, module in WALL.items():
        assert len({symbol.package for symbol in module.SYMBOLS}) == 1, name


@pytest.mark.parametrize("name", sorted(WALL))
def test_the_installed_version_has_every_symbol_the_wall_uses(name):
    problems = [problem(symbol) for symbol in WALL[name].SYMBOLS]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)


def test_the_tensorflow_wall_has_every_symbol_it_uses_and_declares_each():
    """trainer_module/tf_internals.py, TensorFlow's wall: each symbol it declares is there in the
    installed TensorFlow (a rebound one still looked up where it is rebound), and the lint finds
    no internal or private name in its source that it does not declare."""
    from trainer_module import tf_internals

    symbols = [Symbol(module, name, read_by=read_by)
               for module, name, read_by in tf_internals.SYMBOLS]
    problems = [problem(symbol) for symbol in symbols]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)
    declared = {part for symbol in symbols for part in
                symbol.module.split(".") + symbol.name.split(".")}
    found = load_lint().findings([str(REPO / "trainer_module" / "tf_internals.py")])
    assert found and not [str(f) for f in found if f.name not in declared]
    # A moved one is named with the version.
    assert problem(Symbol("tensorflow.python.eager.context", "no_such_context")) == (
        f"tensorflow {version('tensorflow')} no longer has "
        "python.eager.context.no_such_context")


def test_the_executor_members_the_lint_allows_are_there():
    contract = load_lint().EXECUTOR_CONTRACT
    symbols = [Symbol(path.rsplit(".", 1)[0], f"{path.rsplit('.', 1)[1]}.{name}")
               for path, names in contract.items() for name in names]
    problems = [problem(symbol) for symbol in symbols]
    assert len(symbols) == 5 and not any(problems), problems


def test_a_moved_symbol_is_named_with_the_installed_version():
    tfma = version("tensorflow_model_analysis")
    assert tfma[0].isdigit()
    assert problem(Symbol(MPV, "_ComputationsCombineFn")) == ""
    assert problem(Symbol(MPV, "_NoSuchCombineFn")) == (
        f"tensorflow_model_analysis {tfma} no longer has "
        "evaluators.metrics_plots_and_validations_evaluator._NoSuchCombineFn")
    histogram = "tensorflow_model_analysis.metrics.calibration_histogram"
    # An instance attribute, set in the class's __init__:
    assert problem(Symbol(histogram, "_CalibrationHistogramCombiner._left")) == ""
    assert problem(Symbol(histogram, "_CalibrationHistogramCombiner._right")) == (
        f"tensorflow_model_analysis {tfma} no longer has "
        "metrics.calibration_histogram._CalibrationHistogramCombiner._right")
    assert problem(Symbol("tfx.components.no_such_module", "Executor")) == (
        f"tfx {version('tfx')} no longer has components.no_such_module.Executor")


def test_a_rebound_name_no_longer_looked_up_is_named():
    """A rebinding takes effect only where the dependency looks the name up as it runs."""
    assert problem(Symbol(MPV, "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT", read_by=MPV)) == ""
    eval_lib = "tensorflow_model_analysis.api.model_eval_lib"
    assert problem(Symbol(MPV, "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT", read_by=eval_lib)) == (
        f"tensorflow_model_analysis {version('tensorflow_model_analysis')}: {eval_lib} no longer "
        "looks up evaluators.metrics_plots_and_validations_evaluator."
        "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT when it runs, so rebinding it changes nothing")
    # Looked up through its package (`tft_beam.analysis_graph_builder.<name>`), or not at all.
    builder, executor = ("tensorflow_transform.beam.analysis_graph_builder",
                         "tfx.components.transform.executor")
    assert problem(Symbol(builder, "get_analysis_cache_entry_keys", read_by=executor)) == ""
    assert problem(Symbol(builder, "build", read_by=executor)).endswith(
        "so rebinding it changes nothing")


@pytest.mark.parametrize("name", sorted(name for name, module in WALL.items()
                                         if module.SYMBOLS[0].package in load_lint().PACKAGES))
def test_the_wall_declares_every_private_name_it_uses(name):
    """The lint's rule applied to the wall's own source finds nothing it does not declare (Beam
    and dill, whose rebindings compat/beam.py and dill.py declare, are not linted: beam.py's
    docstring says why)."""
    lint = load_lint()
    declared = {part for symbol in WALL[name].SYMBOLS for part in symbol.name.split(".")}
    found = lint.findings([str(REPO / "components" / "compat" / f"{name}.py")])
    assert found and not [str(f) for f in found if f.name not in declared]


def _rebound(context, owner, name):
    stock = getattr(owner, name)
    with pytest.raises(RuntimeError, match="inside"):
        with context:
            assert getattr(owner, name) is not stock
            raise RuntimeError("inside")
    assert getattr(owner, name) is stock


def test_the_rebinds_hold_inside_the_block_only():
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as mpv
    from tensorflow_model_analysis.extractors import unbatch_extractor
    from tfx.components.transform import executor as transform_executor
    from tfx.components.util import tfxio_utils

    _rebound(WALL["tfma"].batches_kept(lambda *args, **kwargs: None), mpv,
             "_ComputeMetricsAndPlots")
    _rebound(WALL["tfma"].batches_kept(lambda *args, **kwargs: None), unbatch_extractor,
             "UnbatchExtractor")
    _rebound(WALL["tfx"].tfxio_factory(lambda *args, **kwargs: None), tfxio_utils, "make_tfxio")
    _rebound(WALL["tfx"].transform_processor(None), transform_executor, "TransformProcessor")
    import tensorflow_transform as tft

    for name in WALL["tft"].INSPECTIONS:
        _rebound(WALL["tft"].inspections_traced_once(), tft, name)
    from tensorflow_transform.beam import analysis_graph_builder

    _rebound(WALL["tft"].inspections_traced_once(), analysis_graph_builder,
             "get_analysis_cache_entry_keys")
    from apache_beam.transforms import core

    from dill import _dill

    _rebound(WALL["beam"].signatures_remembered(), core, "get_function_args_defaults")
    from apache_beam.internal import pickler

    _rebound(WALL["beam"].cloudpickled(), pickler, "DEFAULT_PICKLE_LIB")
    from apache_beam.internal import cloudpickle_pickler

    _rebound(WALL["beam"].cloudpickled(), cloudpickle_pickler, "bz2")
    from apache_beam.transforms import userstate
    from cloudpickle import cloudpickle_fast

    _rebound(WALL["beam"].signatures_remembered(), userstate, "get_dofn_specs")
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.worker import statecache

    _rebound(WALL["beam"].options_parsed_once(), PipelineOptions, "view_as")
    _rebound(WALL["beam"].options_parsed_once(), statecache, "get_deep_size")
    _rebound(WALL["cloudpickle"].submodules_indexed(), cloudpickle_fast,
             "_find_imported_submodules")
    _rebound(WALL["beam"].cloudpickled(), cloudpickle_fast, "_find_imported_submodules")
    _rebound(WALL["dill"].quiet_trace(), _dill, "_trace")
    from tensorflow_transform.saved import saved_transform_io_v2

    _rebound(WALL["tft"].outputs_sourced_once(), saved_transform_io_v2,
             "_get_output_to_inputs_map")
    _rebound(WALL["tft"].transforms_pruned_once(), saved_transform_io_v2.SavedModelLoader,
             "_apply_v1_transform_model_in_v2")


def test_a_transform_graphs_outputs_have_the_sources_tf_transform_finds():
    """The one walk (outputs_sourced_once) against tf.Transform's walk from each output, on a
    graph with what a transform graph has: outputs sharing a subgraph, a sparse output, an output
    on no input, a control dependency (ignored by both), a chain deeper than Python's recursion."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        a, b, c = (tf.compat.v1.placeholder(tf.float32, [None], name=n) for n in "abc")
        shared = a * 2.0 + b
        deep = c
        for _ in range(3000):
            deep = deep + 1.0
        with tf.control_dependencies([c]):
            guarded = tf.identity(a)
        signature = {
            "shared_a": shared + 1.0, "shared_ab": shared * b, "deep": deep,
            "constant": tf.constant(3.0), "guarded": guarded,
            "sparse": tf.sparse.from_dense(tf.reshape(b, [-1, 1]))}
    with graph.as_default():
        theirs = WALL["tft"].their_output_sources(signature)
        ours = WALL["tft"].output_sources(signature)
    assert set(ours) == set(theirs) == set(signature)
    for name in signature:
        assert {t.name for t in ours[name]} == {t.name for t in theirs[name]}, name
    assert {t.name for t in ours["shared_ab"]} == {"a:0", "b:0"}
    assert {t.name for t in ours["deep"]} == {"c:0"} and not ours["constant"]
    assert {t.name for t in ours["guarded"]} == {"a:0"}


def test_transforms_column_inspections_trace_the_preprocessing_fn_once_with_the_same_answers():
    """TFX's Transform executor asks for the analyzers' columns twice and the transform's once,
    and tf.Transform traces the preprocessing_fn for each; inside the block (components/
    transform.py's Do) they answer from one trace, the same lists; the cache keys the analysis
    is planned with take that trace last, the same keys (the next inspection traces anew: their
    build clears a collection of the graph); the analysis's own trace is not shared."""
    import functools

    import tensorflow as tf
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper
    from tensorflow_transform.beam import analysis_graph_builder, analyzer_cache

    from trainer_module import preprocessing
    from trainer_module.settings import CLASSIFICATION
    from trainer_module.custom_config import TransformSpec

    specs = {"bill": tf.io.VarLenFeature(tf.float32), "island": tf.io.VarLenFeature(tf.string),
             "year": tf.io.VarLenFeature(tf.int64), "species": tf.io.FixedLenFeature([], tf.string)}
    fn = functools.partial(preprocessing.preprocessing_fn, custom_config=TransformSpec(
        "species", CLASSIFICATION).to_custom_config())
    asked = [("get_analyze_input_columns", specs), ("get_analyze_input_columns", dict(specs)),
             ("get_transform_input_columns", specs)]
    stock = [sorted(getattr(tft, name)(fn, s, force_tf_compat_v1=True)) for name, s in asked]
    assert stock[0] == stock[1] and set(stock[2]) >= set(stock[0]) and "species" in stock[2]
    spans = [analyzer_cache.DatasetKey("span-0")]
    stock_keys = analysis_graph_builder.get_analysis_cache_entry_keys(fn, specs, spans, True)
    assert len(stock_keys) > 3  # an analyzer's key each: the sums, quantiles, vocabularies
    with WALL["tft"].inspections_traced_once() as traces:
        once = [sorted(getattr(tft, name)(fn, s, force_tf_compat_v1=True)) for name, s in asked]
        assert traces.traced == 1
        keys = analysis_graph_builder.get_analysis_cache_entry_keys(fn, specs, spans, True)
        assert traces.traced == 1 and keys == stock_keys
        assert sorted(tft.get_analyze_input_columns(fn, specs, force_tf_compat_v1=True)) == stock[0]
        assert traces.traced == 2  # taken by the keys: traced again
        other = {**specs, "bill": tf.io.FixedLenFeature([], tf.float32)}
        tft.get_analyze_input_columns(fn, other, force_tf_compat_v1=True)
        assert traces.traced == 3  # other specs: traced for them
        # Anything else that traces (the analysis) traces anew, a graph of its own.
        graph = impl_helper.trace_preprocessing_function(fn, specs, use_tf_compat_v1=True)[0]
        assert traces.traced == 3 and graph.get_operations()
    assert once == stock


def test_tf_transforms_global_combines_have_no_fanout_inside_the_block_only():
    """compat/tft.py, analyzers_in_process: inside the block tf.Transform's analyzers see an
    apache_beam whose CombineGlobally keeps no fanout (Beam spreads a fanned combine by a random
    number per bundle: the sketches then merged in another order each run), which pickles as
    apache_beam itself (a DoFn's function names it); outside the block, Beam's own."""
    import apache_beam as beam
    from apache_beam.internal import pickler
    from tensorflow_transform.beam import analyzer_impls

    assert analyzer_impls.beam is beam and beam.CombineGlobally(sum).with_fanout(10).fanout == 10
    with WALL["tft"].analyzers_in_process():
        seen = analyzer_impls.beam
        assert seen is not beam and seen.Map is beam.Map and seen.pvalue is beam.pvalue
        assert seen.CombineGlobally(sum).with_fanout(10).fanout is None
        assert isinstance(seen.CombineGlobally(sum), beam.CombineGlobally)
        assert pickler.loads(pickler.dumps(seen)) is beam  # as a function's global, by name
    assert analyzer_impls.beam is beam


@pytest.mark.parametrize("lines", [[b"c", "a", b"b", "\u00e9t\u00e9"], []])
def test_a_vocabulary_is_written_in_one_step_as_write_to_text_writes_it(tmp_path, lines):
    """compat/tft.py, analyzers_in_process: inside the block tf.Transform's vocabulary write
    (beam.io.WriteToText, one shard) is OneTextFile: the lines one element makes, in their
    order, the same bytes as WriteToText's file (an empty one too), and no partial file left;
    the rest of beam.io is Beam's own."""
    import apache_beam as beam
    from tensorflow_transform.beam import analyzer_impls

    def write(writer, path):
        with beam.Pipeline() as pipeline:
            _ = (pipeline | beam.Create([None]) | beam.FlatMap(lambda _: lines)
                 | writer(str(path), shard_name_template=""))
        return path.read_bytes()

    with WALL["tft"].analyzers_in_process():
        seen = analyzer_impls.beam.io
        assert seen.WriteToText is WALL["tft"].OneTextFile
        assert seen.WriteToTFRecord is beam.io.WriteToTFRecord
        ours = write(seen.WriteToText, tmp_path / "ours")
    assert ours == write(beam.io.WriteToText, tmp_path / "stock")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours", "stock"]


def test_tf_transforms_approximate_vocabulary_counts_exactly_inside_the_block():
    """compat/tft.py, vocabularies_exact: a column with more distinct values than the top_k it
    keeps (4,000 against 1,024, as a flight number's code list) gets exactly its top_k most
    frequent values, ties in reverse byte order; tf.Transform's own sketch, sized by top_k,
    counts it approximately (and tfx_bsl's sketch drops values in a per-process hash order)."""
    import collections

    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(3)
    values = (rng.zipf(1.2, 200_000) % 4_000).astype(str).astype(object)
    counts = collections.Counter(v.encode() for v in values)
    exact = sorted(counts.items(), key=lambda item: (-item[1], [-b for b in item[0]]))[:1024]

    def top(combiner):
        accumulator = combiner.create_accumulator()
        for start in range(0, len(values), 5_000):
            items, sizes = np.unique(values[start:start + 5_000], return_counts=True)
            accumulator = combiner.add_input(accumulator, (items.astype(bytes), sizes))
        return [(value, int(float(count))) for count, value in combiner.extract_output(
            accumulator)[0]]

    stock = top(WALL["tft"].vocabulary_combiner(1024, tf.string))
    with WALL["tft"].vocabularies_exact():
        inside = top(WALL["tft"].vocabulary_combiner(1024, tf.string))
    assert not isinstance(WALL["tft"].vocabulary_combiner(1024, tf.string),  # outside: its own
                          WALL["tft"].ExactVocabularyCombiner)
    assert inside == exact
    assert stock != exact  # approximate: counts short of the truth


def test_nothing_lockstep_imports_runs_tfxs_component_catalogue():
    """components/compat/deferred.py: every module of `pipeline` and `components` imports in a
    fresh interpreter without tfx.components' `__init__` (KerasTuner and Keras 3 among some
    1,600 modules); the first name asked of the package still runs it, and a name is
    what it would have been. Nor does any read the file lists of all installed packages
    (`importlib.metadata.packages_distributions`: google-api-core from 2.28 did, 0.2 CPU-s in
    every process that imports TensorFlow or Beam: pyproject.toml)."""
    import subprocess
    import sys

    script = """
import importlib, importlib.metadata, pkgutil, sys
scans = []
importlib.metadata.packages_distributions = lambda: scans.append(1) or {}
import components, pipeline
from components.compat import deferred
for package in (components, pipeline):
    for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
            assert not deferred.catalogue_ran(), found.name
assert "keras_tuner" not in sys.modules and "keras" not in sys.modules, "KerasTuner imported"
assert "google.api_core" in sys.modules and not scans, "every package's file list read"
from tfx.components import Trainer
from tfx.components.trainer import component
assert Trainer is component.Trainer and deferred.catalogue_ran()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.strip().endswith("ok"), done.stderr[-3000:]


MULTI_PROCESS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
LOOPBACK = ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]
DATAFLOW = ["--runner=DataflowRunner", "--region=europe-west4"]


@pytest.mark.parametrize("beam_args, here", [
    ([], True), (MULTI_PROCESS, True), (LOOPBACK, True), (DATAFLOW, False),
    (["--runner=PortableRunner", "--job_endpoint=h:8099", "--environment_type=DOCKER"], False),
    (["--direct_running_mode=multi_processing", "--environment_type=DOCKER"], False),
    (["--runner=FlinkRunner"], False),
])
def test_the_workers_are_this_python_only_for_the_direct_runner_or_loopback(beam_args, here,
                                                                          monkeypatch):
    from components.compat import beam as beam_compat

    assert beam_compat.workers_are_here(beam_args) == here
    monkeypatch.setenv(beam_compat.STOCK_SWITCH, "1")  # TFX's own rule, for a side by side
    assert not beam_compat.workers_are_here(beam_args)


def test_tfx_packages_itself_only_for_workers_that_are_not_this_python(tmp_path, monkeypatch):
    """A Beam executor given Beam arguments builds an sdist of TFX for Beam's workers (1.4 to
    1.6 s) unless they name the workers' packages; where the workers are this process's own Python
    (the direct runner, any mode; the LOOPBACK environment) lockstep's Beam executors skip it
    (components/compat/beam.py, `workers_are_here`), and TFX's rule holds elsewhere. (TFX builds
    it in a temporary directory it never removes, 52 MB: here, the test's own.)"""
    import tempfile

    from tfx.dsl.components.base import base_beam_executor

    from components import csv_example_gen, evaluator, statistics_gen, transform
    from components.compat import tfx as tfx_compat

    def made(module, beam_args):
        context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=list(beam_args))
        return tfx_compat.beam_pipeline_args(module.Executor(context))

    for module in (csv_example_gen, statistics_gen, transform, evaluator):
        for beam_args in (MULTI_PROCESS, LOOPBACK):
            args = made(module, beam_args)
            assert args[:len(beam_args)] == beam_args, module.__name__
            assert not any(a.startswith("--extra_package") for a in args), module.__name__
            # LOOPBACK's workers are the submitter: no `pip freeze` staged for them to compare
            # (compat/beam.py, `for_workers_here`); nothing added for the direct runner.
            stays_quiet = "--experiments=disable_logging_submission_environment" in args
            assert stays_quiet == (beam_args == LOOPBACK), (module.__name__, args)
    named = [*LOOPBACK, "--experiments=disable_logging_submission_environment"]
    assert made(statistics_gen, named).count(named[-1]) == 1  # named already: not twice
    named = [*LOOPBACK, "--experiments", "disable_logging_submission_environment"]
    assert not any("submission" in a for a in made(statistics_gen, named)[len(named):])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    [package] = [a for a in made(statistics_gen, DATAFLOW) if a.startswith("--extra_package=")]
    assert "tfx_ephemeral" in package and package.endswith(".tar.gz")  # TFX built it
    assert package.startswith(f"--extra_package={tmp_path}/"), package


@pytest.mark.parametrize("vertex_job", [False, True])
def test_a_tasks_beam_arguments_are_the_specs_own(vertex_job):
    """TFX's task flag parsers take what they do not know for Beam arguments, and absl hands them
    the whole argv: the program's path was every task's one Beam argument, and each Beam task
    packaged TFX for workers it did not have (components/entrypoint.py, `beam_args_parser`)."""
    from components import entrypoint
    from components.compat import tfx as tfx_compat

    argv = ["/venv/lib/python3.11/site-packages/components/entrypoint.py", "--executor_class_path",
            "components.statistics_gen.Executor"]
    if vertex_job:  # the Trainer as a Vertex job's worker runs run_executor's
        from tfx.scripts import run_executor

        parse = run_executor.parse_flags
        argv += ["--inputs-base64", "e30=", "--outputs-base64", "e30=", "--exec-properties-base64",
                 "e30="]
    else:
        _, parse = tfx_compat.kubeflow_v2_entrypoint()
        argv += ["--json_serialized_invocation_args", "{}"]
    assert parse(argv)[1] == argv[:1]  # TFX's own parser, as app.run calls it
    parsed, beam_args = entrypoint.beam_args_parser(parse)(argv)
    assert beam_args == [] and parsed.executor_class_path == "components.statistics_gen.Executor"
    spec = ["--runner=PortableRunner", "--environment_type=LOOPBACK"]
    assert entrypoint.beam_args_parser(parse)(argv + spec)[1] == spec


def test_options_views_parsed_once_are_beams_views():
    """Inside options_parsed_once a view of a pipeline's options has every value Beam's own view
    has, for each options class and flags, the first time and after; a value set through one
    view is every view's (they share the options' values, as Beam's do); a list option is a
    list of the view's own, so that adding to it changes no other pipeline's options."""
    from apache_beam.options import pipeline_options as po

    from components.compat import beam as beam_compat

    flags = ["--runner=DirectRunner", "--direct_num_workers=2", "--experiments=a",
             "--experiments=b", "--job_name=x"]
    classes = [po.StandardOptions, po.DebugOptions, po.DirectOptions, po.GoogleCloudOptions,
               po.SetupOptions, po.PortableOptions, po.WorkerOptions, po.TypeOptions]

    def values(options):
        return {cls.__name__: {name: getattr(options.view_as(cls), name)
                               for name in options.view_as(cls)._visible_option_list()}
                for cls in classes}

    stock = values(po.PipelineOptions(flags))
    with beam_compat.options_parsed_once():
        assert po.PipelineOptions.view_as is not beam_compat._STOCK_VIEW_AS
        first, again = values(po.PipelineOptions(flags)), values(po.PipelineOptions(flags))
        options = po.PipelineOptions(flags)
        options.view_as(po.DebugOptions).add_experiment("c")
        options.view_as(po.StandardOptions).runner = "Other"
        assert options.view_as(po.DebugOptions).experiments == ["a", "b", "c"]
        assert options.view_as(po.StandardOptions).runner == "Other"
        fresh = po.PipelineOptions(flags)
        assert fresh.view_as(po.DebugOptions).experiments == ["a", "b"]
        assert fresh.view_as(po.StandardOptions).runner == "DirectRunner"
    assert first == again == stock
    assert po.PipelineOptions.view_as is beam_compat._STOCK_VIEW_AS


def test_the_state_caches_weights_are_beams():
    """The state cache's deep sizes inside options_parsed_once are Beam's own, module globals
    left out as objsize leaves them out; a module loaded since is left out too."""
    import types

    from apache_beam.runners.worker import statecache

    from components.compat import beam as beam_compat

    shared = {"big": list(range(1000))}
    values = [[1, 2, 3], {"a": "x" * 100, "b": (1.5, None)}, shared, [shared, shared],
              sys.modules[__name__].__dict__, object()]
    stock = [statecache.get_deep_size(v) for v in values]
    with beam_compat.options_parsed_once():
        assert [statecache.get_deep_size(v) for v in values] == stock
        module = types.ModuleType("lockstep_test_loaded_later")
        module.payload = ["y" * 1000]
        sys.modules[module.__name__] = module
        try:
            inside = statecache.get_deep_size([vars(module)])
        finally:
            del sys.modules[module.__name__]
    sys.modules[module.__name__] = module
    try:
        assert inside == statecache.get_deep_size([vars(module)])
    finally:
        del sys.modules[module.__name__]
