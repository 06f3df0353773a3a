"""tf.Transform: the inspections of a preprocessing_fn that TFX's Transform executor asks for,
answered from one trace (`inspections_traced_once`).

Before its pipeline, TFX's Transform executor asks tf.Transform which raw columns the analyzers
read (`get_analyze_input_columns`, twice: once to fail early, once to plan the analysis) and which
the transform reads (`get_transform_input_columns`). Each answer traces the preprocessing_fn into
a new graph and reads it: three traces of the same function on the same inputs, 0.6 of Transform's
3.2 s on the bundled data and 1.35 of 8.1 s for examples/wide_deep. Inside the block each of the
three traces once per (preprocessing_fn, specs, graph mode) and reads that graph: the inspections
only read a graph (its collections and its ops' inputs), and each makes its own visitor. The other
traces (the analysis itself, and the cache keys it plans with) are tf.Transform's own, as before.

tf.Transform's `trace_preprocessing_function` is in `impl_helper`, which it does not publish;
`inspect_preprocessing_fn` looks it up there each time an inspection runs, and TFX's executor looks
the two inspections up on the `tensorflow_transform` module each time (SYMBOLS)."""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

from components.compat.swapped import swapped
from components.compat.symbols import Symbol

_IMPL_HELPER = "tensorflow_transform.impl_helper"
_INSPECT = "tensorflow_transform.inspect_preprocessing_fn"
_TRANSFORM_EXECUTOR = "tfx.components.transform.executor"
SYMBOLS = (
    Symbol(_IMPL_HELPER, "trace_preprocessing_function", read_by=_INSPECT),
    Symbol("tensorflow_transform", "get_analyze_input_columns", read_by=_TRANSFORM_EXECUTOR),
    Symbol("tensorflow_transform", "get_transform_input_columns", read_by=_TRANSFORM_EXECUTOR),
)
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


@contextlib.contextmanager
def inspections_traced_once() -> Iterator[_Traces]:
    """For the block, tf.Transform's two column inspections (as TFX's Transform executor calls
    them) trace each preprocessing_fn once between them; anything else that traces it (the
    analysis) traces it as before. Yields the traces' record."""
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper

    traces = _Traces(impl_helper.trace_preprocessing_function)

    def answered_from_one_trace(inspection):
        @functools.wraps(inspection)
        def inspect(*args, **kwargs):
            with swapped(impl_helper, "trace_preprocessing_function", traces):
                return list(inspection(*args, **kwargs))
        return inspect

    with swapped(tft, "get_analyze_input_columns",
                 answered_from_one_trace(tft.get_analyze_input_columns)), \
            swapped(tft, "get_transform_input_columns",
                    answered_from_one_trace(tft.get_transform_input_columns)):
        yield traces
