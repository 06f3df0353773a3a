"""Transform's analyzer cache across spans (components/transform.py): the analysis of a window
whose older spans come from the cache equals tf.Transform's full analysis of the same window, no
cache is written without spans, and a damaged cache is passed over, saying so. Runs the real
CsvExampleGen and Transform executors.

The window's runs are benchmarks/analyzer_cache.py's smoke (tests/test_benchmarks.py names this
test for it): its table is checked here, and its work directory is the window the damaged cache
is tried on."""

import importlib.util
import re
import types

import pytest

from conftest import REPO
from test_benchmarks import TABLES, smoke


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "analyzer_cache_benchmark", REPO / "benchmarks" / "analyzer_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_an_incremental_analysis_equals_the_full_one(tmp_path):
    out, _ = smoke("analyzer_cache.py", tmp_path)
    assert TABLES["analyzer_cache.py"] in out, out
    # Spans 2 and 3 after spans 1 and 2: span 2 from the cache, span 3 analyzed, and the same
    # transform as the full analysis of spans 2 and 3.
    assert re.search(r"^round 1: full analysis of 2 spans [\d.]+s, incremental \(spans 2 from the "
                     r"cache, 3 analyzed\) [\d.]+s; largest output difference 0\.00e\+00$", out,
                     re.M), out
    [work] = tmp_path.glob("lockstep-analyzer-cache-*")
    latest = (work / "analyzer_cache" / "LATEST").read_text()
    assert latest == str(work / "transform-2" / "cache")
    cached = sorted(p.name for p in (work / "transform-2" / "cache").iterdir())
    assert [name[:9] for name in cached] == ["span00002", "span00003"]
    # The full analysis (no cache dir) wrote no cache.
    assert not (work / "transform-2-full" / "cache").exists()

    # Bytes overwritten in the latest cache after Transform wrote it: the next Transform reads
    # no cache (its files are not what LATEST.files recorded), says why on its graph (the run's
    # summary shows it), analyzes every span of its window, and equals the full analysis.
    from tfx.types import standard_artifacts

    bench = _benchmark()
    damaged = sorted(p for p in (work / "transform-2" / "cache").rglob("*") if p.is_file())[0]
    content = bytearray(damaged.read_bytes())
    content[:8] = bytes(8) if content[:8] != bytes(8) else b"\xff" * 8
    damaged.write_bytes(bytes(content))
    examples = bench.ingest(work / "data", 2, work / "examples-3")
    schema = standard_artifacts.Schema()
    schema.uri = str(work / "schema")
    _, graph = bench.transform(examples, schema, work / "transform-3",
                               str(work / "analyzer_cache"))
    assert graph.get_string_custom_property("analyzer_cache_passed_over") == (
        f"its analyzer cache {work / 'transform-2' / 'cache'} passed over: {damaged} has "
        "other bytes than were written (its CRC-32 differs)")
    assert graph.get_string_custom_property("cached_spans") == ""
    assert graph.get_string_custom_property("analyzed_spans") == "2,3"
    full = types.SimpleNamespace(uri=str(work / "transform-2-full" / "graph"))
    assert bench.largest_difference(graph, full, examples) == 0.0
