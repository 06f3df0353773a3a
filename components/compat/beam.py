"""Apache Beam: six names rebound while lockstep's Beam executors run, to spare fixed costs
(`spare_fixed_costs`, with dill's in compat/dill.py and cloudpickle's in compat/cloudpickle.py).

Beam makes a view of a pipeline's options (`PipelineOptions.view_as`) wherever it reads one:
about 3,200 times in a Transform of a 53-column table. Each view builds its class's argparse
parser and parses the same flags again, 0.9 s in all; `options_parsed_once` parses them once per
class and flags and gives each view a copy of that answer. In the same block the state cache
of Beam's SDK worker, which weighs every value it loads with objsize, finds the loaded modules'
globals (which a weight leaves out) once per count of loaded modules, not by a walk of all 6,500
modules at each value: the same weights.

Beam asks for a DoFn's state and timer parameters (`userstate.get_dofn_specs`) each time it
builds, translates, validates or starts a bundle of a DoFn step: about 3,700 times in a
`lockstep run` on the bundled data (344 rows). Each time it reads the signature of every method
of the DoFn, through `core.get_function_args_defaults` and `inspect.signature`: 108,000
signatures, 2.8 s of a 22 s run on one core, for what is the same answer each time. In the same
process a function's parameters and their defaults do not change unless its code, defaults or
wrapper are replaced, so `signatures_remembered` has that function remember its answer per
function (a method's per the function it binds) for as long as the function lives, and works
it out again where any of those changed. Callables that are not Python functions (builtins,
partials, classes, objects with __call__) are asked every time, as before. The answer for the
DoFn as a whole (a walk over its attributes, 0.8 s a run even with the signatures remembered) is
remembered per DoFn too, while its own attributes stay the same objects: Beam asks about 3,700
times for some 830 DoFns.

Beam pickles every function and DoFn of a pipeline with dill, whose pickler is pure Python: about
2,800 pickles in a run on the bundled data (a Map's function is pickled and unpickled as the
transform is made, to copy it and prove it can be), 2.1 s, and 0.5 s more to unpickle them. Where
a pipeline pickles only for this process (`pickles_in_process`: the direct runner in memory,
Beam's default, and no pickle library named) `cloudpickled` has it pickle with cloudpickle,
which Beam also ships and supports (`--pickle_library=cloudpickle`) and which later Beam releases
make the default: it pickles through the C pickler, and by value what dill does (lambdas,
closures, the classes of `__main__`). A pipeline for another process (a portable or remote
runner, the direct runner's worker processes) or one that names its library pickles as before:
its workers choose their unpickler from the same options. cloudpickle's own fixed cost, a walk
over every loaded module for each function it pickles by value, is spared there too
(compat/cloudpickle.py), and so is Beam's bz2 compression of every pickle (`Uncompressed`).

Given any Beam argument, a TFX Beam executor builds an sdist of TFX for Beam's workers (1.4 to
1.6 s, each time an executor is made) unless the arguments name the workers' packages. Where the
workers are this process's own Python (`workers_are_here`: the direct runner in any of its
modes, the LOOPBACK environment) nothing would install it, so it is not built there
(compat/tfx.py, `package_tfx_unless`): `--direct_running_mode=multi_processing` no longer needs
`--sdk_container_image=none` beside it to spare it. Nor does a LOOPBACK pipeline stage a
`pip freeze` of the submitting Python for its workers to compare theirs with: they are that
Python (`for_workers_here`).

LOCKSTEP_STOCK_BEAM=1 in the environment leaves Beam's, dill's and cloudpickle's functions (and
TFX's packaging) as they are (for a side-by-side measure, benchmarks/beam_fixed_costs.py, or to
rule this out).

Beam is not among the dependencies tools/private_names.py lints (its heuristics match too many
of lockstep's own names against a package this large); the rebinding lives here all the same,
declared in SYMBOLS, so that tests/test_compat.py names it when an upgrade moves it."""

from __future__ import annotations

import bz2
import contextlib
import copy
import functools
import os
import sys
import types
import weakref

import objsize
from apache_beam.internal import cloudpickle_pickler, pickler
from apache_beam.options.pipeline_options import (DebugOptions, DirectOptions, PipelineOptions,
                                                  PortableOptions, SetupOptions, StandardOptions)
from apache_beam.runners.worker import statecache
from apache_beam.transforms import core, userstate

from components.compat import cloudpickle as cloudpickle_compat, dill as dill_compat
from components.compat import tfx as tfx_compat
from components.compat.swapped import swapped
from components.compat.symbols import Symbol

_CORE = core.__name__
_PICKLER = pickler.__name__
SYMBOLS = (Symbol(_CORE, "get_function_args_defaults", read_by=_CORE),
           Symbol(userstate.__name__, "get_dofn_specs", read_by=_CORE),
           Symbol(_PICKLER, "DEFAULT_PICKLE_LIB", read_by=_PICKLER),
           Symbol(_PICKLER, "desired_pickle_lib"),
           Symbol(cloudpickle_pickler.__name__, "bz2", read_by=cloudpickle_pickler.__name__),
           Symbol(PipelineOptions.__module__, "PipelineOptions.view_as"),
           Symbol(PipelineOptions.__module__, "PipelineOptions._visible_option_list"),
           Symbol(statecache.__name__, "get_deep_size", read_by=statecache.__name__),
           Symbol(statecache.__name__, "_size_func"),
           Symbol(statecache.__name__, "_get_referents_func"),
           Symbol(statecache.__name__, "_filter_func"))
# The runners that run a pipeline in this process when the direct runner runs in memory.
_IN_PROCESS_RUNNERS = {None, "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner"}

STOCK_SWITCH = "LOCKSTEP_STOCK_BEAM"
_STOCK = core.get_function_args_defaults
# function -> (what the answer depends on, the answer); one table for the function itself, one
# for a method bound to it (its first parameter, the instance, left out).
_OF_FUNCTION: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_OF_METHOD: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _depends_on(function: types.FunctionType) -> tuple:
    """What inspect.signature reads of a Python function, each compared by identity."""
    return (function.__code__, function.__defaults__, function.__kwdefaults__,
            getattr(function, "__wrapped__", None), getattr(function, "__signature__", None))


def _remembered(f):
    """core.get_function_args_defaults(f), remembered per Python function."""
    if isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
        table, function = _OF_METHOD, f.__func__
    elif isinstance(f, types.FunctionType):
        table, function = _OF_FUNCTION, f
    else:
        return _STOCK(f)
    state = _depends_on(function)
    known = table.get(function)
    if known is None or any(a is not b for a, b in zip(known[0], state)):
        known = table[function] = (state, _STOCK(f))
    args, defaults = known[1]
    return list(args), list(defaults)  # the callers' own lists, as Beam gives them


_STOCK_SPECS = userstate.get_dofn_specs
# DoFn -> (its attributes as (name, id of the value), its (state specs, timer specs))
_SPECS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _specs_remembered(dofn) -> tuple[set, set]:
    """userstate.get_dofn_specs(dofn), remembered per DoFn while its own attributes stay the same
    objects (a CallableWrapperDoFn keeps its function there, as `process`)."""
    try:
        attributes = tuple((name, id(value)) for name, value in vars(dofn).items())
        known = _SPECS.get(dofn)
    except TypeError:  # no __dict__, or cannot be weakly referenced or hashed: asked every time
        return _STOCK_SPECS(dofn)
    if known is None or known[0] != attributes:
        known = (attributes, _STOCK_SPECS(dofn))
        _SPECS[dofn] = known
    states, timers = known[1]
    return set(states), set(timers)  # the caller's own sets, as Beam gives them


@contextlib.contextmanager
def signatures_remembered():
    """Inside the block, Beam's `core.get_function_args_defaults` remembers its answers per
    function, and `userstate.get_dofn_specs` its answers per DoFn."""
    with swapped(core, "get_function_args_defaults", _remembered), swapped(
            userstate, "get_dofn_specs", _specs_remembered):
        yield


_STOCK_VIEW_AS = PipelineOptions.view_as
# (options class, flags) -> the argparse Namespace the class's parser made of those flags.
_PARSED: dict = {}


def _view_as(self, cls):
    """PipelineOptions.view_as(cls), its flags parsed once per options class and flags: Beam
    builds the class's argparse parser and parses the flags again for every view (about 3,200
    views in a Transform of a 53-column table: 0.9 s), though the same flags give the same
    values. The view is Beam's as it makes it (the Namespace a copy of its own), sharing the
    options' values; a class with an __init__ of its own, or flags that do not hash (None: the
    process's argv), is made by Beam's own view_as."""
    flags = self._flags
    try:
        key = (cls, tuple(flags))
        hash(key)
    except TypeError:
        return _STOCK_VIEW_AS(self, cls)
    if cls.__init__ is not PipelineOptions.__init__:
        return _STOCK_VIEW_AS(self, cls)
    parsed = _PARSED.get(key)
    if parsed is None:
        view = _STOCK_VIEW_AS(self, cls)
        _PARSED[key] = copy.deepcopy(view._visible_options)  # noqa: SLF001  Beam's own view
        return view
    view = object.__new__(cls)
    view._flags = flags  # noqa: SLF001  the three attributes Beam's __init__ sets
    view._visible_options = copy.deepcopy(parsed)  # noqa: SLF001 - the wall: Beam's own views
    for option_name in view._visible_option_list():  # noqa: SLF001  as view_as does
        if option_name not in self._all_options:  # noqa: SLF001 - the wall: Beam's own views
            self._all_options[option_name] = getattr(view._visible_options, option_name)  # noqa: SLF001 - the wall: Beam's own views
    view._all_options = self._all_options  # noqa: SLF001 - the wall: Beam's own views
    return view


# The ids of the loaded modules' globals, which a deep size leaves out, as of `_GLOBALS["count"]`
# modules.
_GLOBALS: dict = {"count": -1, "ids": frozenset()}


def _module_globals() -> frozenset:
    if len(sys.modules) != _GLOBALS["count"]:
        ids = set()
        for module in list(sys.modules.values()):
            try:
                ids.add(id(vars(module)))
            except TypeError:
                pass
        _GLOBALS.update(count=len(sys.modules), ids=frozenset(ids))
    return _GLOBALS["ids"]


def _deep_size(*objs) -> int:
    """statecache.get_deep_size(*objs), the same figure: objsize leaves every loaded module's
    globals out of a deep size, and finds them by walking every module at every call (a
    Transform's state cache weighs each value it loads: 274 walks of 6,500 modules). Here they
    are found once per count of loaded modules, and left out by the filter (objsize skips an
    object its filter refuses as it skips one it excludes)."""
    excluded = _module_globals()
    measured = statecache._filter_func  # noqa: SLF001  Beam's own filter, kept
    return objsize.get_deep_size(
        *objs, get_size_func=statecache._size_func,  # noqa: SLF001 - the wall: Beam's own views
        get_referents_func=statecache._get_referents_func,  # noqa: SLF001 - the wall: Beam's own views
        filter_func=lambda o: id(o) not in excluded and measured(o),
        exclude_modules_globals=False)


@contextlib.contextmanager
def options_parsed_once():
    """Inside the block, a pipeline's options views parse their flags once per options class and
    flags (`_view_as`), and the state cache weighs its values without walking every module at
    each value (`_deep_size`)."""
    with swapped(PipelineOptions, "view_as", _view_as), swapped(
            statecache, "get_deep_size", _deep_size):
        yield


def pickles_in_process(beam_args: list[str] | None) -> bool:
    """Whether a pipeline made with these Beam arguments pickles for this process only: the direct
    runner (Beam's default) in memory (its default), and no pickle library named. None (not a Beam
    executor's): no."""
    if beam_args is None:
        return False
    options = PipelineOptions(beam_args)
    return (options.view_as(StandardOptions).runner in _IN_PROCESS_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode == "in_memory"
            and options.view_as(SetupOptions).pickle_library == "default")


def workers_are_here(beam_args: list[str]) -> bool:
    """Whether a pipeline made with these Beam arguments runs its work on this process's own
    Python, where every package its workers would need is installed: the direct runner (in memory,
    on its threads, or on its worker processes, which start this interpreter), or any runner with
    the LOOPBACK environment (this process serves as the SDK worker). Not with
    LOCKSTEP_STOCK_BEAM=1. TFX packages itself for the workers unless this holds
    (`tfx_compat.package_tfx_unless`, below)."""
    if os.environ.get(STOCK_SWITCH) == "1":
        return False
    options = PipelineOptions(beam_args)
    environment = options.view_as(PortableOptions).environment_type
    return environment == "LOOPBACK" or (
        options.view_as(StandardOptions).runner in _IN_PROCESS_RUNNERS
        and environment in (None, "EMBEDDED"))


# Beam's experiment that keeps its stager from running `pip freeze` (a fresh interpreter, 1.2 to
# 1.4 CPU-s) for a file of the submitting environment's packages, staged beside each portable
# pipeline for the workers to compare theirs with.
NO_SUBMISSION_ENVIRONMENT = "disable_logging_submission_environment"


def for_workers_here(beam_args: list[str]) -> list[str]:
    """The Beam arguments for a pipeline whose workers are this process's own Python
    (`workers_are_here`): as given, and with the LOOPBACK environment (a portable runner, which
    stages) `NO_SUBMISSION_ENVIRONMENT`: there the workers' packages are the submitter's, so
    there is nothing to compare, and each of a run's Beam pipelines spared a `pip freeze`."""
    options = PipelineOptions(beam_args)
    if (options.view_as(PortableOptions).environment_type != "LOOPBACK"
            or options.view_as(DebugOptions).lookup_experiment(NO_SUBMISSION_ENVIRONMENT)):
        return list(beam_args)  # named already: the stager asks the same way
    return [*beam_args, f"--experiments={NO_SUBMISSION_ENVIRONMENT}"]


class Uncompressed:
    """What Beam's cloudpickle pickler compresses its pickles with inside `cloudpickled`: nothing.
    Beam compresses each pickle with bz2 at its highest level (for its size in a pipeline's proto
    sent to a remote runner) and decompresses it at each unpickling: 0.9 CPU-s of a `lockstep run`
    on the bundled data, for pickles that never leave the process. A pickle bz2 compressed (made
    before the block) still decompresses."""

    MARK = b"lockstep-uncompressed:"

    @staticmethod
    def compress(data: bytes, compresslevel: int = 9) -> bytes:
        return Uncompressed.MARK + data

    @staticmethod
    def decompress(data: bytes) -> bytes:
        mark = Uncompressed.MARK
        return data[len(mark):] if data[:len(mark)] == mark else bz2.decompress(data)


@contextlib.contextmanager
def cloudpickled():
    """Inside the block a Beam pipeline that names no pickle library pickles with cloudpickle (a
    Pipeline sets its library as it is made, "default" read as DEFAULT_PICKLE_LIB then), its
    pickles uncompressed (`Uncompressed`); after it, Beam pickles with the library it had before,
    compressed."""
    before = (pickler.USE_CLOUDPICKLE if pickler.desired_pickle_lib is cloudpickle_pickler
              else pickler.USE_DILL)
    try:
        with swapped(pickler, "DEFAULT_PICKLE_LIB", pickler.USE_CLOUDPICKLE), \
                swapped(cloudpickle_pickler, "bz2", Uncompressed), \
                cloudpickle_compat.submodules_indexed():
            yield
    finally:
        pickler.set_library(before)


def spare_fixed_costs(do):
    """An executor's Do, run with Beam's signatures remembered (`signatures_remembered`), its
    options' flags parsed once and its state cache's weights found without a walk of every
    module each (`options_parsed_once`), dill's
    trace quiet (compat/dill.py) and, where its pipelines pickle for this process only,
    cloudpickle (`cloudpickled`); none of them with LOCKSTEP_STOCK_BEAM=1. And from the class that
    says so on (its module has TFX loaded), TFX packages itself for Beam's workers only where
    they are not this process's Python (`workers_are_here`)."""
    tfx_compat.package_tfx_unless(workers_are_here, for_workers_here)
    @functools.wraps(do)
    def wrapper(*args, **kwargs):
        if os.environ.get(STOCK_SWITCH) == "1":
            return do(*args, **kwargs)
        in_process = bool(args) and pickles_in_process(tfx_compat.beam_pipeline_args(args[0]))
        with signatures_remembered(), options_parsed_once(), dill_compat.quiet_trace(), (
                cloudpickled() if in_process else contextlib.nullcontext()):
            return do(*args, **kwargs)
    return wrapper


def stock_signature(f) -> tuple[list, list]:
    """Beam's own answer, never remembered (for tests comparing the two)."""
    return _STOCK(f)
