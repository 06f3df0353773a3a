"""tf.Transform: the inspections of a preprocessing_fn that TFX's Transform executor asks for,
answered from one trace (`inspections_traced_once`); and the same preprocessing for the same data:
its approximate vocabularies exact up to EXACT_VOCABULARY_VALUES distinct values
(`vocabularies_exact`), its analyzers combined without a fanout where the workers are this process
(`analyzers_in_process`, which also writes each vocabulary in one step).

Before its pipeline, TFX's Transform executor asks tf.Transform which raw columns the analyzers
read (`get_analyze_input_columns`, twice: once to fail early, once to plan the analysis) and which
the transform reads (`get_transform_input_columns`). Each answer traces the preprocessing_fn into
a new graph and reads it: three traces of the same function on the same inputs, 0.6 of Transform's
3.2 s on the bundled data and 1.35 of 8.1 s for examples/wide_deep. Inside the block each of the
three traces once per (preprocessing_fn, specs, graph mode) and reads that graph: the inspections
only read a graph (its collections and its ops' inputs), and each makes its own visitor. The cache
keys the executor plans the analysis with (`get_analysis_cache_entry_keys`, which builds the
analysis graph of one more trace: 3.3 of loans' 26 s of Transform, in a profile) take that trace
too, and last: that build clears a collection of the graph it reads, so the trace leaves the record
with them. The analysis itself traces its own, as before.

tf.Transform's `trace_preprocessing_function` is in `impl_helper`, which it does not publish;
`inspect_preprocessing_fn` looks it up there each time an inspection runs, and TFX's executor looks
the two inspections up on the `tensorflow_transform` module each time (SYMBOLS).

Loading a transform graph (`TFTransformOutput.transform_features_layer()`, the Trainer's) finds
which graph inputs each output depends on: one walk of the graph back from each output
(`_get_output_to_inputs_map`), a walk a feature: 6.3 of the 7.8 s the load took at 200 numeric
columns (601 outputs). `outputs_sourced_once` finds them in one walk of the graph for every
output, with the same answer. Each application of a TF1 transform graph then prunes it into a
function of its inputs (0.7 s on a 53-column table), the same inputs three times in a Trainer:
`transforms_pruned_once` makes each prune once."""

from __future__ import annotations

import contextlib
import functools
import importlib
import types
from typing import Iterator

import apache_beam
from tensorflow_transform.beam import analyzer_impls as _analyzer_impls
from tfx_bsl import sketches

from components.compat.swapped import swapped
from components.compat.symbols import Symbol

_ANALYZER_IMPLS = "tensorflow_transform.beam.analyzer_impls"
_EXPERIMENTAL = "tensorflow_transform.experimental.analyzers"
_IMPL_HELPER = "tensorflow_transform.impl_helper"
_SAVED_IO = "tensorflow_transform.saved.saved_transform_io_v2"
_INSPECT = "tensorflow_transform.inspect_preprocessing_fn"
_TRANSFORM_EXECUTOR = "tfx.components.transform.executor"
_GRAPH_BUILDER = "tensorflow_transform.beam.analysis_graph_builder"
SYMBOLS = (
    Symbol(_IMPL_HELPER, "trace_preprocessing_function", read_by=_INSPECT),
    Symbol(_IMPL_HELPER, "trace_preprocessing_function", read_by=_GRAPH_BUILDER),
    Symbol(_GRAPH_BUILDER, "get_analysis_cache_entry_keys", read_by=_TRANSFORM_EXECUTOR),
    Symbol("tensorflow_transform", "get_analyze_input_columns", read_by=_TRANSFORM_EXECUTOR),
    Symbol("tensorflow_transform", "get_transform_input_columns", read_by=_TRANSFORM_EXECUTOR),
    Symbol(_ANALYZER_IMPLS, "beam", read_by=_ANALYZER_IMPLS),
    Symbol(_EXPERIMENTAL, "_VocabularyCombiner", read_by=_EXPERIMENTAL),
    Symbol(_EXPERIMENTAL, "_VocabularyCombiner._top_k"),
    Symbol(_EXPERIMENTAL, "_VocabularyCombiner._output_pylist"),
    Symbol(_SAVED_IO, "_get_output_to_inputs_map", read_by=_SAVED_IO),
    Symbol(_SAVED_IO, "_get_component_tensors"),
    Symbol(_SAVED_IO, "_as_operation"),
    # A method, looked up on its class at each call: no module to read it by name.
    Symbol(_SAVED_IO, "SavedModelLoader._apply_v1_transform_model_in_v2"),
    Symbol(_SAVED_IO, "SavedModelLoader._wrapped_function"),
    # The set tf.Transform's own walk returns (graph_tools.retrieve_sources), and its loader
    # takes the difference of: TensorFlow's, reached as tf.Transform imports it.
    Symbol("tensorflow_transform.graph_tools", "object_identity.ObjectIdentitySet"),
)
# tf.Transform's approximate vocabularies count exactly the columns with at most this many distinct
# values (`vocabularies_exact`): a Misra-Gries sketch of this size.
EXACT_VOCABULARY_VALUES = 1 << 16
_experimental = importlib.import_module(_EXPERIMENTAL)  # the package's __init__ shadows the name
INSPECTIONS = ("get_analyze_input_columns", "get_transform_input_columns")


class _Traces:
    """The traces made inside one block: [((preprocessing_fn, specs, graph mode), trace)]. Specs
    are compared by equality (TypeSpecs and feature specs compare by value), so no key needs
    them hashable; a block sees one or two."""

    def __init__(self, trace):
        self._trace, self._made = trace, []
        self.traced = 0  # how many traces were made (tests)

    def __call__(self, preprocessing_fn, specs, use_tf_compat_v1=False, **kwargs):
        key = (preprocessing_fn, dict(specs), use_tf_compat_v1, kwargs)
        for made, trace in self._made:
            if made == key:
                return trace
        trace = self._trace(preprocessing_fn, specs, use_tf_compat_v1=use_tf_compat_v1, **kwargs)
        self._made.append((key, trace))
        self.traced += 1
        return trace

    def taken(self, preprocessing_fn, specs, use_tf_compat_v1=False, **kwargs):
        """The trace as a call gives it, which then leaves the record: for a reader that changes
        its graph."""
        trace = self(preprocessing_fn, specs, use_tf_compat_v1=use_tf_compat_v1, **kwargs)
        self._made = [(key, made) for key, made in self._made if made is not trace]
        return trace


@contextlib.contextmanager
def inspections_traced_once() -> Iterator[_Traces]:
    """For the block, tf.Transform's two column inspections (as TFX's Transform executor calls
    them) trace each preprocessing_fn once between them, and the analysis's cache keys take
    that trace last; anything else that traces it (the analysis) traces it as before. Yields the
    traces' record."""
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper
    from tensorflow_transform.beam import analysis_graph_builder

    traces = _Traces(impl_helper.trace_preprocessing_function)

    def answered_from_one_trace(inspection):
        @functools.wraps(inspection)
        def inspect(*args, **kwargs):
            with swapped(impl_helper, "trace_preprocessing_function", traces):
                return list(inspection(*args, **kwargs))
        return inspect

    cache_keys = analysis_graph_builder.get_analysis_cache_entry_keys

    @functools.wraps(cache_keys)
    def cache_keys_from_the_trace(*args, **kwargs):
        with swapped(impl_helper, "trace_preprocessing_function", traces.taken):
            return cache_keys(*args, **kwargs)

    with swapped(tft, "get_analyze_input_columns",
                 answered_from_one_trace(tft.get_analyze_input_columns)), \
            swapped(tft, "get_transform_input_columns",
                    answered_from_one_trace(tft.get_transform_input_columns)), \
            swapped(analysis_graph_builder, "get_analysis_cache_entry_keys",
                    cache_keys_from_the_trace):
        yield traces


def analyzers_in_process():
    """For the block, where every Beam worker is this process, tf.Transform's analyzers combine
    their accumulators without a fanout (below) and write each vocabulary file in one step
    (`OneTextFile`).

    tf.Transform combines each analyzer's accumulators globally with a fanout of 10 or more
    (`beam.CombineGlobally(...).with_fanout(n)`, in its private analyzer_impls), so that on a
    distributed runner the reduce step does not make one straggler. Beam spreads such a combine
    over `n` sub-accumulators by a random number drawn per bundle, so the order accumulators merge
    in can change from run to run, and so can what depends on it (float sums in another order, the
    quantiles' sketches). Where every worker is this process there is nothing to spread
    (components/transform.py asks only then), and the accumulators merge in the order of the
    records read (components/batched_records.py).

    tf.Transform writes a vocabulary with Beam's WriteToText (one shard): a write of several
    stages (a temporary directory made, the bundles written, grouped, the shard renamed into
    place) a vocabulary, loans' 42 vocabularies about 170 stages, most of the Transform's run
    and a third of building its pipeline. The vocabulary's lines come from one element (ordered
    by fusion, its own comment says): `OneTextFile` writes them, in the order they come, to a
    temporary file renamed into place at the bundle's end, in the step that makes them."""
    return swapped(_analyzer_impls, "beam", _IN_PROCESS_BEAM)


class UnfannedCombineGlobally(apache_beam.CombineGlobally):
    """Beam's CombineGlobally, whose with_fanout keeps it as it is."""

    def with_fanout(self, fanout):
        return self


class _WriteLines(apache_beam.DoFn):
    """The lines of a bundle, as WriteToText encodes them (bytes as they are, else their text in
    UTF-8, each ended by a newline), to `path`: a temporary file beside it, renamed into place."""

    def __init__(self, path: str):
        self.path = path

    def start_bundle(self):
        self.lines = []

    def process(self, line):
        self.lines.append(line if isinstance(line, bytes) else str(line).encode("utf-8"))

    def finish_bundle(self):
        import tensorflow as tf

        partial = f"{self.path}.partial"
        with tf.io.gfile.GFile(partial, "wb") as handle:
            handle.write(b"".join(line + b"\n" for line in self.lines))
        tf.io.gfile.rename(partial, self.path, overwrite=True)


class OneTextFile(apache_beam.PTransform):
    """WriteToText(path, shard_name_template="") of lines that come in one bundle, in one step
    with the step that makes them; its output (empty) is ready once the file is."""

    def __init__(self, path: str, shard_name_template: str = "", **kwargs):
        super().__init__()
        if shard_name_template != "" or kwargs:
            raise ValueError("OneTextFile writes one file of lines, as tf.Transform's vocabulary")
        self.path = path

    def expand(self, lines):
        return lines | "WriteLines" >> apache_beam.ParDo(_WriteLines(self.path))


class _StandIn(types.ModuleType):
    """A module as tf.Transform's analyzer_impls reads it, but for `names`: a module of the same
    name and names (a name it makes later looked up on it), pickled as the module by name (a
    function of analyzer_impls that Beam pickles in the block names it)."""

    def __init__(self, module, **names):
        super().__init__(module.__name__, module.__doc__)
        self.__dict__.update(vars(module))
        self.__getattr__ = functools.partial(getattr, module)  # a name the module made since
        self.__dict__.update(names)

    def __reduce__(self):
        return importlib.import_module, (self.__name__,)


# apache_beam but for CombineGlobally (no fanout) and io.WriteToText (one step).
_IN_PROCESS_BEAM = _StandIn(apache_beam, CombineGlobally=UnfannedCombineGlobally,
                            io=_StandIn(apache_beam.io, WriteToText=OneTextFile))


def vocabularies_exact():
    """For the block, tf.Transform's approximate vocabularies (`tft.experimental.
    approximate_vocabulary` and its compute_and_apply) count exactly every column with at most
    EXACT_VOCABULARY_VALUES distinct values, then keep the `top_k` most frequent (ties in reverse
    byte order, as the sketch orders them).

    tf.Transform sizes its Misra-Gries sketch by `top_k` itself. A column with more distinct values
    than that (a flight number's 3,800 against a code list of 1,024) is then counted approximately,
    and tfx_bsl's sketch drops values in the order of a C++ hash table seeded per process: the same
    rows, in the same order, gave another list of the rarest values kept in each process (and so
    another model). A sketch larger than the column's distinct values counts exactly, whatever
    the order (it cost less time than the small one on such columns: no value is ever dropped).
    Beyond EXACT_VOCABULARY_VALUES distinct values the counts stay approximate (docs/training.md
    names what that changes between runs)."""
    return swapped(_experimental, "_VocabularyCombiner", ExactVocabularyCombiner)


def vocabulary_combiner(top_k: int, input_dtype):
    """The combiner tf.Transform's approximate vocabulary makes now (its class as the name is
    bound: tf.Transform's own, or vocabularies_exact's inside that block)."""
    return _experimental._VocabularyCombiner(top_k, input_dtype)


class ExactVocabularyCombiner(_experimental._VocabularyCombiner):
    """tf.Transform's _VocabularyCombiner with a sketch of at least EXACT_VOCABULARY_VALUES
    values, its output the `top_k` most frequent."""

    def create_accumulator(self):
        return sketches.MisraGriesSketch(
            max(self._top_k, EXACT_VOCABULARY_VALUES),
            order_on_tie=sketches.MisraGriesSketch.OrderOnTie.ReverseLexicographical)

    def extract_output(self, accumulator):
        result = super().extract_output(accumulator)  # [1, values, (count, value)], by count
        if self._output_pylist:
            return [row[:self._top_k] for row in result]
        return result[:, :self._top_k]


def outputs_sourced_once():
    """For the block, loading a transform graph finds each output's graph inputs in one walk of
    the graph for all outputs (each op's sources found once, from its inputs'), where
    tf.Transform walks back from each output alone: the same sets (placeholders' outputs,
    control dependencies ignored, as tf.Transform's walk ignores them there)."""
    saved_io = importlib.import_module(_SAVED_IO)
    return swapped(saved_io, "_get_output_to_inputs_map", output_sources)


def their_output_sources(output_signature) -> dict:
    """tf.Transform's own answer, a walk from each output (outside the block; the tests compare
    with it)."""
    return importlib.import_module(_SAVED_IO)._get_output_to_inputs_map(output_signature)


def output_sources(output_signature) -> dict:
    """tf.Transform's `_get_output_to_inputs_map`, in one walk: {output name: the set of
    Placeholder outputs it depends on}."""
    from tensorflow_transform import graph_tools

    object_identity = graph_tools.object_identity
    saved_io = importlib.import_module(_SAVED_IO)
    found: dict = {}  # op -> its sources

    def sources(op):
        stack = [(op, False)]
        while stack:
            node, ready = stack.pop()
            if node in found:
                continue
            if not ready:
                stack.append((node, True))
                stack.extend((t.op, False) for t in node.inputs if t.op not in found)
                continue
            here = object_identity.ObjectIdentitySet(
                node.outputs if node.type == "Placeholder" else ())
            for tensor in node.inputs:
                here.update(found[tensor.op])
            found[node] = here
        return found[op]

    result = {}
    for name, output in output_signature.items():
        result[name] = object_identity.ObjectIdentitySet()
        for component in saved_io._get_component_tensors(output):
            result[name].update(sources(saved_io._as_operation(component)))
    return result



@contextlib.contextmanager
def transforms_pruned_once() -> Iterator["Prunes"]:
    """For the block, a transform graph loaded as TF1 (tf.Transform's graph mode, the Trainer's)
    is pruned once for each set of inputs it is applied to, where tf.Transform prunes it again
    at each call of its layer (0.7 s a prune on a 53-column table): the train, validation and eval
    input, the served model's transform of the labels and the label's scaling each apply it to
    the raw spec, the served signature to the raw spec without the label. A prune's function
    depends only on the graph, its inputs and its outputs, so a later call with the same ones
    takes the one made. Yields the Prunes made (tests)."""
    saved_io = importlib.import_module(_SAVED_IO)
    loader = saved_io.SavedModelLoader
    theirs = loader._apply_v1_transform_model_in_v2
    made = Prunes()

    def apply(self, logical_input_map):
        wrapped = self._wrapped_function
        wrapped.prune = functools.partial(made.prune, wrapped, type(wrapped).prune)
        try:
            return theirs(self, logical_input_map)
        finally:
            del wrapped.prune  # the class's again

    with swapped(loader, "_apply_v1_transform_model_in_v2", apply):
        yield made


class Prunes:
    """The functions pruned from loaded transform graphs, by (graph, feeds, fetches): the graph's
    own tensors, so compared by identity."""

    def __init__(self):
        self._made: dict = {}
        self.count = 0  # how many prunes were made

    def prune(self, wrapped, prune, feeds, fetches, *args, **kwargs):
        named = sorted(fetches.items()) if isinstance(fetches, dict) else [(None, fetches)]
        key = (id(wrapped), tuple(id(t) for t in feeds), tuple((k, id(v)) for k, v in named),
               args, tuple(sorted(kwargs.items())))
        if key not in self._made:  # the graph kept with its function: its ids stay its own
            self._made[key] = (wrapped, prune(wrapped, feeds, fetches, *args, **kwargs))
            self.count += 1
        return self._made[key][1]
