"""Transform's analyzer cache across spans (components/transform.py): the analysis of a window
whose older spans come from the cache equals tf.Transform's full analysis of the same window, and
no cache is written without spans. Runs the real CsvExampleGen and Transform executors."""

import importlib.util

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
