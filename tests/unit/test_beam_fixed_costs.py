"""Two fixed costs of Beam's spared while lockstep's Beam executors run (components/compat/beam.py,
`spare_fixed_costs`), each giving what Beam gives without it:
- Beam's answer to "what are this function's parameters and their defaults", remembered: Beam's
  own answer every time, for every kind of callable, after a function's defaults change, and for
  DoFns with state and timers; and inspect is asked once per function instead of each time;
- dill's trace after each pickle (compat/dill.py): its logger's level the same, set only where it
  differs;
- cloudpickle, not dill, where the executor's pipelines pickle for this process only: the same
  output (closures and a stateful DoFn), dill elsewhere, and Beam's library put back;
- a DoFn's state and timer specs remembered per DoFn, asked again when its attributes change;
- cloudpickle's imported submodules found from an index (compat/cloudpickle.py): its own answer,
  the index made again only when modules are loaded."""

import base64
import bz2
import functools
import logging

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.internal import cloudpickle_pickler, dill_pickler, pickler
from apache_beam.transforms import core, userstate
from dill import _dill

from components.compat import beam as beam_compat, cloudpickle as cloudpickle_compat
from components.compat import dill as dill_compat


class _Stateful(beam.DoFn):
    COUNT = userstate.CombiningValueStateSpec("count", VarIntCoder(), sum)
    FLUSH = userstate.TimerSpec("flush", userstate.TimeDomain.WATERMARK)

    def process(self, element, count=beam.DoFn.StateParam(COUNT),
                flush=beam.DoFn.TimerParam(FLUSH)):
        count.add(1)
        flush.set(0)

    @userstate.on_timer(FLUSH)
    def on_flush(self, count=beam.DoFn.StateParam(COUNT)):
        yield count.read()


class _Counting(beam.DoFn):
    SEEN = userstate.ReadModifyWriteStateSpec("seen", VarIntCoder())

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
        count = (seen.read() or 0) + 1
        seen.write(count)
        yield element[0], count


def _plain(a, b=2, *rest, c=3, **more):
    return a


class _Callable:
    def __call__(self, x, y=1):
        return x


def _callables():
    return [_plain, lambda element, side=None: element, _Stateful().process,
            _Stateful.on_flush, functools.partial(_plain, 1), len, str.strip, _Callable(),
            _Callable, beam.Map(lambda x: x).fn.process, core.CallableWrapperDoFn(_plain).process]


def test_the_remembered_answer_is_beams_own_for_every_kind_of_callable():
    stock = [beam_compat.stock_signature(f) for f in _callables()]
    with beam_compat.signatures_remembered():
        assert core.get_function_args_defaults is not beam_compat.stock_signature
        first = [core.get_function_args_defaults(f) for f in _callables()]
        again = [core.get_function_args_defaults(f) for f in _callables()]
    assert first == stock and again == stock
    assert core.get_function_args_defaults is beam_compat._STOCK  # put back after the block


def test_an_executors_do_runs_with_both_and_the_switch_leaves_both_alone(monkeypatch):
    seen = []

    @beam_compat.spare_fixed_costs
    def do(*args):
        seen.append((core.get_function_args_defaults, _dill._trace, args))

    stock = (core.get_function_args_defaults, _dill._trace)
    do(1, 2)
    monkeypatch.setenv(beam_compat.STOCK_SWITCH, "1")
    do(3)
    assert seen == [(beam_compat._remembered, dill_compat._trace, (1, 2)), (*stock, (3,))]
    assert (core.get_function_args_defaults, _dill._trace) == stock


def test_dills_trace_sets_the_level_only_where_it_differs(monkeypatch):
    set_to, traced = [], []
    monkeypatch.setattr(_dill.log, "setLevel", set_to.append)
    quiet = dill_compat._trace
    monkeypatch.setattr(dill_compat, "_trace", lambda boolean: traced.append(boolean) or quiet(
        boolean))
    monkeypatch.setattr(_dill.log, "level", logging.WARN)
    for _ in range(5):  # as Beam pickles: its trace set back to WARN after each
        assert pickler.loads(pickler.dumps(_plain)) is _plain
    assert len(set_to) >= 10  # dill's own: the level set each time, each clearing every cache
    set_to.clear()
    with dill_compat.quiet_trace():
        for _ in range(5):
            assert pickler.loads(pickler.dumps(_plain)) is _plain
    assert traced == [False] * 10 and set_to == []  # Beam still calls it: the rebinding holds
    dill_compat._trace(True)
    assert set_to == [logging.INFO]  # a level that differs is set


def test_a_caller_gets_its_own_lists():
    with beam_compat.signatures_remembered():
        args, defaults = core.get_function_args_defaults(_plain)
        args.append("changed"), defaults.clear()
        assert core.get_function_args_defaults(_plain) == (["a", "b"], [2])


def test_new_defaults_give_a_new_answer():
    def f(x, y=1):
        return x

    with beam_compat.signatures_remembered():
        assert core.get_function_args_defaults(f) == (["x", "y"], [1])
        f.__defaults__ = (5,)
        assert core.get_function_args_defaults(f) == (["x", "y"], [5])
        g = functools.wraps(f)(lambda *a: None)  # a wrapper: inspect follows __wrapped__
        assert core.get_function_args_defaults(g) == beam_compat.stock_signature(g)
        g.__wrapped__ = _plain
        assert core.get_function_args_defaults(g) == beam_compat.stock_signature(_plain)


def test_state_and_timer_specs_are_found_as_beam_finds_them():
    dofn = _Stateful()
    stock = userstate.get_dofn_specs(dofn)
    with beam_compat.signatures_remembered():
        assert userstate.get_dofn_specs(dofn) == stock == ({_Stateful.COUNT}, {_Stateful.FLUSH})
        assert userstate.is_stateful_dofn(dofn)
        userstate.validate_stateful_dofn(dofn)
        assert not userstate.is_stateful_dofn(beam.Map(lambda x: x).dofn)


def test_inspect_is_asked_once_per_function(monkeypatch):
    """What spares the run its cost: Beam asks for a DoFn's specs thousands of times a run."""
    beam_compat._OF_FUNCTION.clear(), beam_compat._OF_METHOD.clear()  # nothing known yet
    asked = []
    stock = beam_compat._STOCK
    monkeypatch.setattr(beam_compat, "_STOCK", lambda f: asked.append(f) or stock(f))
    dofn = _Stateful()
    with beam_compat.signatures_remembered():
        for _ in range(50):
            userstate.get_dofn_specs(dofn)
        methods = len(asked)
        userstate.get_dofn_specs(_Stateful())  # another instance: its methods' functions are known
    assert 0 < methods == len(asked)
    asked.clear()
    for _ in range(2):
        userstate.get_dofn_specs(dofn)
    assert len(asked) == 0  # outside the block Beam calls its own function, not the wall's
    monkeypatch.undo()
    counted = []
    monkeypatch.setattr(core, "get_function_args_defaults",
                        lambda f: counted.append(f) or stock(f))
    userstate.get_dofn_specs(dofn)
    assert len(counted) == methods  # once per method: what Beam asks every time without the wall


def test_a_stateful_pipeline_gives_the_same_output_inside_the_block():
    def run():
        with beam.Pipeline("DirectRunner") as pipeline:
            counts = (pipeline | beam.Create([("a", 1), ("a", 2), ("b", 3)])
                      | beam.ParDo(_Counting()))
            assert_that(counts, equal_to([("a", 1), ("a", 2), ("b", 1)]))

    run()
    with beam_compat.signatures_remembered():
        run()


@pytest.mark.parametrize("executor", ["csv_example_gen", "statistics_gen", "transform",
                                      "evaluator"])
def test_each_beam_executor_runs_with_signatures_remembered(executor):
    """The four executors that run Beam pipelines, read from source (importing them imports
    TensorFlow, which this tier does not)."""
    from conftest import REPO

    source = (REPO / "components" / f"{executor}.py").read_text()
    assert "    @beam_compat.spare_fixed_costs" in source.split("    def Do(self")[0][-200:]


@pytest.mark.parametrize("beam_args, in_process", [
    ([], True), (["--runner=DirectRunner"], True), (["--direct_num_workers=2"], True),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
    (["--direct_running_mode=multi_threading"], False),
    (["--runner=PortableRunner", "--job_endpoint=embed"], False),
    (["--runner=DataflowRunner", "--project=p", "--region=r"], False),
    (["--pickle_library=dill"], False), (["--pickle_library=cloudpickle"], False), (None, False)])
def test_a_pipeline_pickles_for_this_process_only_on_the_direct_runner_in_memory(beam_args,
                                                                                   in_process):
    assert beam_compat.pickles_in_process(beam_args) is in_process


def _picker(column):
    return lambda row: (column, row[column])


class _Executor:
    """What spare_fixed_costs reads of a TFX Beam executor: its Beam arguments."""

    def __init__(self, beam_args):
        self._beam_pipeline_args = beam_args
        self.pickled_with = None

    @beam_compat.spare_fixed_costs
    def Do(self, columns):
        with beam.Pipeline(argv=self._beam_pipeline_args) as pipeline:
            self.pickled_with = pickler.desired_pickle_lib
            self.pickle_starts = base64.b64decode(pickler.dumps(_picker("a")))[:3]
            rows = pipeline | "rows" >> beam.Create([{"a": 1, "b": 2}, {"a": 3, "b": 4}])
            for column in columns:  # each Map's function a closure of its own
                picked = rows | f"pick {column}" >> beam.Map(_picker(column))
                assert_that(picked, equal_to([(column, row[column]) for row in
                                              [{"a": 1, "b": 2}, {"a": 3, "b": 4}]]),
                            label=f"check {column}")
            counts = (pipeline | "keyed" >> beam.Create([("a", 1), ("a", 2), ("b", 3)])
                      | beam.ParDo(_Counting()))
            assert_that(counts, equal_to([("a", 1), ("a", 2), ("b", 1)]), label="counts")


@pytest.mark.parametrize("beam_args, library", [([], cloudpickle_pickler),
                                                (["--direct_running_mode=multi_threading"],
                                                 dill_pickler)])
def test_an_executor_pickles_in_process_with_cloudpickle_and_beam_is_put_back(beam_args, library,
                                                                              monkeypatch):
    assert pickler.desired_pickle_lib is dill_pickler
    executor = _Executor(beam_args)
    executor.Do(["a", "b"])
    assert executor.pickled_with is library
    # In process its pickles are not compressed (bz2's start with "BZh"); after it, Beam's are.
    in_process = library is cloudpickle_pickler
    assert (executor.pickle_starts == beam_compat.Uncompressed.MARK[:3]) is in_process
    assert (executor.pickle_starts == b"BZh") is not in_process
    assert pickler.desired_pickle_lib is dill_pickler and pickler.DEFAULT_PICKLE_LIB == "dill"
    assert cloudpickle_pickler.bz2 is bz2
    monkeypatch.setenv(beam_compat.STOCK_SWITCH, "1")
    executor.Do(["b"])
    assert executor.pickled_with is dill_pickler  # the switch: Beam's own


def test_a_pickle_made_before_the_block_still_loads_in_it():
    made = cloudpickle_pickler.dumps(_picker("b"))  # bz2 compressed, as Beam makes it
    with beam_compat.cloudpickled():
        assert cloudpickle_pickler.loads(made)({"b": 7}) == ("b", 7)
        ours = cloudpickle_pickler.dumps(_picker("a"))
        assert base64.b64decode(ours).startswith(beam_compat.Uncompressed.MARK)
        assert cloudpickle_pickler.loads(ours)({"a": 5}) == ("a", 5)
    assert beam_compat.Uncompressed.decompress(bz2.compress(b"rows")) == b"rows"


def test_a_dofns_specs_are_remembered_until_its_attributes_change(monkeypatch):
    asked = []
    stock = beam_compat._STOCK_SPECS
    monkeypatch.setattr(beam_compat, "_STOCK_SPECS", lambda dofn: asked.append(dofn) or stock(
        dofn))
    stateful, mapped = _Stateful(), beam.Map(lambda x: x).dofn
    with beam_compat.signatures_remembered():
        for _ in range(20):  # as Beam asks: thousands of times for some hundreds of DoFns
            assert userstate.get_dofn_specs(stateful) == ({_Stateful.COUNT}, {_Stateful.FLUSH})
            assert userstate.get_dofn_specs(mapped) == (set(), set())
        assert asked == [stateful, mapped]  # once each (fails without the memo: 40)
        states, _ = userstate.get_dofn_specs(stateful)
        states.clear()  # the caller's own set
        assert userstate.get_dofn_specs(stateful)[0] == {_Stateful.COUNT}
        stateful.process = _Counting().process  # an attribute of its own: asked again
        assert userstate.get_dofn_specs(stateful) == stock(stateful)
        assert asked[-1] is stateful and len(asked) == 3
        assert userstate.is_stateful_dofn(stateful)
    assert userstate.get_dofn_specs is stock  # put back after the block


def _uses_submodules():
    import os
    import xml.etree.ElementTree
    return os.path.join, xml.etree.ElementTree


def test_cloudpickles_submodules_from_the_index_are_its_own(monkeypatch):
    import os
    import sys
    import types
    import xml

    _uses_submodules()
    monkeypatch.setattr(sys, "modules", dict(sys.modules))  # this test's own: no thread's imports
    cases = [(_uses_submodules.__code__, [os, xml]), ((lambda: os.path).__code__, [os, 3]),
             ((lambda: xml.dom).__code__, [xml]), ((lambda: len).__code__, [os, xml])]
    for code, dependencies in cases:
        got = cloudpickle_compat._find_imported_submodules(code, dependencies)
        assert got == cloudpickle_compat.stock_submodules(code, dependencies)
    assert cloudpickle_compat._find_imported_submodules(*cases[0]) != []
    index = cloudpickle_compat._submodules()
    for code, dependencies in cases * 5:
        cloudpickle_compat._find_imported_submodules(code, dependencies)
    assert cloudpickle_compat._submodules() is index  # no module loaded: the same index
    loaded = sys.modules["xml.lockstep_test"] = types.ModuleType("xml.lockstep_test")
    xml.lockstep_test = loaded
    try:
        assert cloudpickle_compat._submodules() is not index  # a module loaded: made again
        code = (lambda: xml.lockstep_test).__code__
        got = cloudpickle_compat._find_imported_submodules(code, [xml])
        assert got == cloudpickle_compat.stock_submodules(code, [xml]) == [loaded]
    finally:
        del xml.lockstep_test
