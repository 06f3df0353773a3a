"""Every benchmark in benchmarks/ runs at a tiny size (its --smoke) and prints its table, so one
that breaks fails here (`make bench-smoke` runs them all). One takes seconds; the others are
slow-marked, and those that run pipelines run on the bundled data or generated tables (none
downloads: CI has no data cache)."""

import os
import subprocess
import sys
import time

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
    "pipeline_e2e.py": "lockstep / reference = ",
    "kfp_local.py": "kfp-local / local = ",
    "model_quality.py": "penguins    accuracy ",
    "scale.py": "Whole pipeline on 500 rows: ",
    "whole_run.py": "penguins: lockstep ",
    "sync_vs_async.py": "async / sync examples/s: ",
    "figures.py": "bundled data, first run, fresh root: Total ",
}
# In the fast tier: seconds. The others start TensorFlow in more than one process, trace twice
# (trace_cost.py: 70 s under load) or run pipelines.
FAST = {"record_reading.py"}
# Slow, and in CI: under a minute each. The pipeline benchmarks' smokes take 2 to 6 minutes each
# on 2 cores (25 minutes together under load), more than CI's budget allows beside the suite:
# they run with LOCKSTEP_BENCH_SMOKE=all (`make bench-smoke`).
IN_CI = {"compile_time.py", "trainer_throughput.py"}
ALL = os.environ.get("LOCKSTEP_BENCH_SMOKE") == "all"
HELPERS = {"harness.py", "datasets.py"}  # imported by the others, no table of their own


def test_every_benchmark_has_a_smoke_run():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - HELPERS
    assert scripts == set(TABLES), "a benchmark without a smoke run here, or one gone"
    for name in scripts:
        assert "--smoke" in (BENCHMARKS / name).read_text(), name


def smoke(script: str) -> tuple[str, float]:
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=str(REPO))
    tic = time.perf_counter()
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=1200)
    seconds = time.perf_counter() - tic
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result.stdout, seconds


@pytest.mark.parametrize("script", sorted(FAST))
def test_smoke_run_prints_its_table(script):
    out, seconds = smoke(script)
    print(f"{script}: {seconds:.1f}s\n{out}")
    assert TABLES[script] in out, out


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(set(TABLES) - FAST))
def test_pipeline_benchmark_smoke_run_prints_its_table(script):
    if script not in IN_CI and not ALL:
        pytest.skip(f"{script} --smoke takes minutes: LOCKSTEP_BENCH_SMOKE=all (make bench-smoke)")
    out, seconds = smoke(script)
    print(f"{script}: {seconds:.1f}s\n{out}")
    assert TABLES[script] in out, out
