"""Transform's analyzer cache across spans (components/transform.py): the analysis of a window
whose older spans come from the cache equals tf.Transform's full analysis of the same window, no
cache is written without spans, and a damaged cache is passed over, saying so. Runs the real CsvExampleGen and Transform executors."""

import importlib.util
import types

import pytest

from conftest import REPO


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "analyzer_cache_benchmark", REPO / "benchmarks" / "analyzer_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_an_incremental_analysis_equals_the_full_one(tmp_path):
    bench = _benchmark()
    _, _, difference, graph = bench.window_runs(tmp_path, rows=400, window=2)
    # Spans 2 and 3 after spans 1 and 2: span 2 from the cache, span 3 analyzed.
    assert graph.get_string_custom_property("cached_spans") == "2"
    assert graph.get_string_custom_property("analyzed_spans") == "3"
    assert difference == 0.0
    latest = (tmp_path / "analyzer_cache" / "LATEST").read_text()
    assert latest == str(tmp_path / "transform-2" / "cache")
    cached = sorted(p.name for p in (tmp_path / "transform-2" / "cache").iterdir())
    assert [name[:9] for name in cached] == ["span00002", "span00003"]
    # The full analysis (no cache dir) wrote no cache.
    assert not (tmp_path / "transform-2-full" / "cache").exists()

    # Bytes overwritten in the latest cache after Transform wrote it: the next Transform reads
    # no cache (its files are not what LATEST.files recorded), says why on its graph (the run's
    # summary shows it), analyzes every span of its window, and equals the full analysis.
    damaged = sorted(p for p in (tmp_path / "transform-2" / "cache").rglob("*") if p.is_file())[0]
    content = bytearray(damaged.read_bytes())
    content[:8] = bytes(8) if content[:8] != bytes(8) else b"\xff" * 8
    damaged.write_bytes(bytes(content))
    examples = bench.ingest(tmp_path / "data", 2, tmp_path / "examples-3")
    schema = bench.infer_schema(examples, tmp_path / "schema-3")
    _, graph = bench.transform(examples, schema, tmp_path / "transform-3",
                               str(tmp_path / "analyzer_cache"))
    assert graph.get_string_custom_property("analyzer_cache_passed_over") == (
        f"its analyzer cache {tmp_path / 'transform-2' / 'cache'} passed over: {damaged} has "
        "other bytes than were written (its CRC-32 differs)")
    assert graph.get_string_custom_property("cached_spans") == ""
    assert graph.get_string_custom_property("analyzed_spans") == "2,3"
    full = types.SimpleNamespace(uri=str(tmp_path / "transform-2-full" / "graph"))
    assert bench.largest_difference(graph, full, examples) == 0.0
