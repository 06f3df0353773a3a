"""Every benchmark in benchmarks/ runs at a tiny size (its --smoke) and prints its table, so one
that breaks fails here (`make bench-smoke` runs them all). Each smoke runs both sides of its
comparisons, on the bundled data or generated tables (none downloads: CI has no data cache), in
seconds to a minute or two on 2 cores. One takes seconds (the fast tier); the others start
TensorFlow in more than one process or run pipelines (slow-marked, in `make test`).

Three smokes run where their run is shared with the tests of what they measure (ELSEWHERE):
kfp_local.py's makes tests/test_kfp_local.py's kfp.local run and tests/test_example.py's
LocalDagRunner run of the example (tests/conftest.py, `wide_deep_runs`), sync_vs_async.py's
trains from the root of tests/test_parameter_server.py's parameter-server run, and
analyzer_cache.py's window is the one tests/test_analyzer_cache.py damages a cache in; those
tests check the table.

Each smoke runs with TMPDIR set to its test's own directory: its work directories (the
benchmarks make them with tempfile) are its own beside other tests (pytest-xdist), and a smoke
that fails leaves the logs it names there, under pytest's base temporary directory."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

BENCHMARKS = REPO / "benchmarks"
# script -> a line its table prints (a regular expression's fixed start is enough here)
TABLES = {
    "record_reading.py": "per record / in blocks = ",
    "trace_cost.py": " columns  lockstep s",
    "trainer_throughput.py": "loop / ceiling  = ",
    "compile_time.py": "ratio lockstep / stock = ",
    "analyzer_cache.py": "median of 1, 200 rows per span, window 2: Transform full ",
    "kfp_local.py": "kfp-local / local = ",
    "model_quality.py": "penguins    accuracy ",
    "scale.py": "ExampleGen + StatisticsGen + Transform: lockstep ",
    "whole_run.py": "penguins: lockstep ",
    "sync_vs_async.py": "async / sync examples/s: ",
    "figures.py": "bundled data, first run, fresh root: Total ",
    "beam_fixed_costs.py": "beam_fixed_costs: stock / spared Total = ",
    "import_collections.py": "import_collections: plain / uncollected import CPU = ",
    "embedding_memory.py": "split / one device: peak RSS in the Trainer ",
    "embeddings.py": "click table: 20,000 rows, 2,000 users; eval AUC: every value ",
    "input_traces.py": "  parse map trace: boolean_mask a feature ",
}
# In the fast tier: seconds (import_collections' smoke imports Beam twice, not TensorFlow). The
# others start TensorFlow in more than one process, trace twice or run pipelines: 15 s to 2
# minutes each on 2 cores under load.
FAST = {"record_reading.py", "import_collections.py"}
HELPERS = {"harness.py", "datasets.py"}  # imported by the others, no table of their own
# script -> the test (not in this file) that runs its smoke and checks its table
ELSEWHERE = {
    "analyzer_cache.py":
        "tests/test_analyzer_cache.py::test_an_incremental_analysis_equals_the_full_one",
    "kfp_local.py": "tests/test_kfp_local.py::test_the_kfp_local_benchmark_prints_its_table",
    "sync_vs_async.py":
        "tests/test_parameter_server.py::test_the_sync_vs_async_benchmark_prints_its_table",
}


def test_every_benchmark_has_a_smoke_run():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - HELPERS
    assert scripts == set(TABLES), "a benchmark without a smoke run here, or one gone"
    for name in scripts:
        assert "--smoke" in (BENCHMARKS / name).read_text(), name
    for name, test in ELSEWHERE.items():  # the test is there, reads its table; it or a fixture
        path, function = test.split("::")  # of its file or of conftest.py smokes it
        text = (REPO / path).read_text()
        smoked = text + (REPO / "tests" / "conftest.py").read_text()
        assert f"def {function}(" in text and re.search(rf'\bsmoke(_process)?\("{name}"', smoked), test
        assert f'TABLES["{name}"]' in text.split(f"def {function}(")[1].split("\ndef ")[0], test
        assert test in (REPO / "Makefile").read_text(), f"make bench-smoke runs no {test}"


def smoke_process(script: str, tmp: Path, *extra,
                  timeout: int = 1200) -> tuple[subprocess.CompletedProcess, float]:
    """(the process, wall seconds) of `benchmarks/<script> --smoke *extra`, TMPDIR in `tmp`."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=str(REPO), TMPDIR=str(tmp))
    tic = time.perf_counter()
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke",
                             *map(str, extra)], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=timeout)
    return result, time.perf_counter() - tic


def smoke_failed(script: str, tmp: Path, result: subprocess.CompletedProcess,
                 seconds: float | None = None) -> str:
    """What a failed smoke says: its output's end, and where its work directories are."""
    after = f" after {seconds:.0f}s" if seconds is not None else ""
    return (f"{script} --smoke failed{after} (its work directories: {tmp})\n"
            + (result.stdout + result.stderr)[-4000:])


def smoke(script: str, tmp: Path, *extra, timeout: int = 1200) -> tuple[str, float]:
    """(stdout, wall seconds) of `benchmarks/<script> --smoke *extra`, TMPDIR in `tmp`."""
    result, seconds = smoke_process(script, tmp, *extra, timeout=timeout)
    assert result.returncode == 0, smoke_failed(script, tmp, result, seconds)
    return result.stdout, seconds


@pytest.mark.parametrize("script", sorted(FAST))
def test_smoke_run_prints_its_table(script, tmp_path):
    out, seconds = smoke(script, tmp_path)
    print(f"{script}: {seconds:.1f}s\n{out}")
    assert TABLES[script] in out, out


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(set(TABLES) - FAST - set(ELSEWHERE)))
def test_pipeline_benchmark_smoke_run_prints_its_table(script, tmp_path):
    out, seconds = smoke(script, tmp_path)
    print(f"{script}: {seconds:.1f}s\n{out}")
    assert TABLES[script] in out, out


@pytest.mark.slow
def test_model_quality_fits_the_boosters_on_the_rows_lockstep_trained_on(penguins_run):
    """--same-rows: benchmarks/model_quality.py reads the run's train split back from its
    ExampleGen's columnar copies: every row of the split once, each one of the CSV's rows with
    its cells (a float as float32, as the tf.Example holds it; a missing cell missing)."""
    import collections
    import re

    import numpy as np
    import pandas as pd

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import model_quality
    finally:
        sys.path.remove(str(BENCHMARKS))
    rows = model_quality.train_split(penguins_run.pipeline_root)
    source = pd.read_csv(REPO / "data" / "penguins" / "penguins.csv")
    train = int(re.search(r"train (\d+) rows, eval \d+ rows", penguins_run.first.stdout).group(1))
    assert len(rows) == train and sorted(rows.columns) == sorted(source.columns)
    assert rows["species"].dtype == object and rows["sex"].isna().any()  # 11 rows lack it

    def cells(frame):  # each row's cells, floats as float32
        frame = frame[sorted(source.columns)]
        return collections.Counter(tuple("" if pd.isna(v) else str(np.float32(v))
                                         if isinstance(v, float) else str(v) for v in row)
                                   for row in frame.itertuples(index=False))

    assert cells(rows) <= cells(source)
