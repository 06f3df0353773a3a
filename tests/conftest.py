"""Test setup. Tiers: tests/unit/ never imports TensorFlow (the hooks below fail a test that
does); elsewhere, TensorFlow gets 8 emulated CPU replicas before a test module is imported,
and legacy Keras, both before TensorFlow starts. Shared here: the CLI in this process or in a
fresh one, and the expensive real runs several test files read (session fixtures)."""

import contextlib
import gc
import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

import trainer_module  # noqa: F401  (legacy Keras, one OpenBLAS thread: lockstep's settings)
from runtime import processes

REPO = Path(__file__).resolve().parent.parent
UNIT = Path(__file__).resolve().parent / "unit"
REPLICAS = 8  # emulated CPU devices: multi-replica tests run MirroredStrategy over subsets


def emulate_replicas() -> None:
    """Splits the CPU into REPLICAS logical devices, once, before TensorFlow's runtime starts
    (a test module may import TensorFlow; none runs an op at import)."""
    import tensorflow as tf

    [cpu] = tf.config.list_physical_devices("CPU")
    if len(tf.config.get_logical_device_configuration(cpu) or []) != REPLICAS:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(REPLICAS)])


def replica_strategy(replicas: int):
    """One device (OneDeviceStrategy on the CPU), or MirroredStrategy over the first `replicas`
    of the emulated CPU devices, reducing through one device: the in-process strategies of the
    equivalence tests."""
    import tensorflow as tf

    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    assert len(devices) == replicas
    return tf.distribute.MirroredStrategy(devices,
                                          cross_device_ops=tf.distribute.ReductionToOneDevice())


def _in_unit(path) -> bool:
    return UNIT in Path(path).resolve().parents


# The unit tier (`make test-unit`): every test under tests/unit is marked `unit` and runs without
# TensorFlow. A module whose import brings TensorFlow in fails to collect, a test whose setup or
# run does fails, each naming itself. Told only while TensorFlow is not loaded yet, as in `make
# test-unit`; beside the other tiers it already is.
HEAVY = "tensorflow"


def _brought_in(what: str) -> str:
    return (f"{what} imported {HEAVY}; the unit tier never does (tests/conftest.py): move the "
            "test out of tests/unit, or the import into the code that needs it")


# Seconds each test took in a whole suite (tools/test_seconds.py writes them from a run's JUnit
# XML). With workers (`make test`: pytest-xdist) a test file goes to one worker whole, its module
# fixtures made once, but for the files in APART, whose tests share nothing costly of their own
# (each runs its own pipelines or processes): their tests are spread one by one. Longest first,
# so that no long one starts last while the other worker idles. A test not listed counts as
# DEFAULT_SECONDS.
SECONDS = Path(__file__).resolve().parent / "test_seconds.json"
DEFAULT_SECONDS = 5.0
APART = {"tests/test_benchmarks.py", "tests/test_dag_runner.py", "tests/test_elastic_resume.py",
         "tests/test_faults.py", "tests/test_push.py", "tests/test_stops.py",
         "tests/test_trainer_jobs.py"}


def scope(nodeid: str) -> str:
    """What goes to one worker whole: the test's file, or the test itself in APART files."""
    path = nodeid.split("::")[0]
    return nodeid if path in APART else path


def pytest_collection_modifyitems(items):
    import collections
    import json

    for item in items:
        if _in_unit(item.path):
            item.add_marker(pytest.mark.unit)
    seconds = json.loads(SECONDS.read_text()) if SECONDS.exists() else {}
    cost = collections.Counter()
    for item in items:
        cost[scope(item.nodeid)] += seconds.get(item.nodeid, DEFAULT_SECONDS)
    items.sort(key=lambda item: -cost[scope(item.nodeid)])  # stable: a file's tests keep order


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduler (--dist loadscope), a work unit a `scope`, handed out in the order
    collected (longest first), not reordered by its number of tests."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return scope(nodeid)

    return ByScope(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test module is imported as it is collected: outside tests/unit, TensorFlow with its
    replicas first; under it, TensorFlow must not come in. Its imports pay no cycle collection
    (runtime/processes.py, `imports_uncollected`: 1.6 of a collection's 8.8 CPU-s)."""
    module, unit = isinstance(collector, pytest.Module), _in_unit(collector.path)
    if module and not unit:
        emulate_replicas()
    before = HEAVY in sys.modules
    with processes.imports_uncollected() if module else contextlib.nullcontext():
        report = yield
    if module and unit and not before and HEAVY in sys.modules:
        report.outcome, report.longrepr = "failed", _brought_in(f"importing {collector.nodeid}")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    before = HEAVY in sys.modules
    result = yield
    if _in_unit(item.path) and not before and HEAVY in sys.modules:
        pytest.fail(_brought_in(f"{item.nodeid}'s setup"), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    before = HEAVY in sys.modules
    result = yield
    if _in_unit(item.path) and not before and HEAVY in sys.modules:
        pytest.fail(_brought_in(item.nodeid), pytrace=False)
    return result


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """pytest is done (its summary, its reports): the process ends as `lockstep` does
    (trainer_module/processes exit_now: threads joined, atexit handlers run, output flushed),
    without the interpreter's teardown, in which TensorFlow's runtime took about a minute to let
    go of the threads the suite's strategies and datasets left (1,200 after
    tests/test_synchronous_training.py; 62 s of a 6-minute fast tier)."""
    if _STATUS in config.stash:
        from pipeline.cli import exit_now

        exit_now(config.stash[_STATUS])


_STATUS = pytest.StashKey[int]()


@pytest.fixture(scope="module", autouse=True)
def _freeze_what_came_before():
    """The objects alive as a test module starts (the libraries' hundreds of thousands: TensorFlow,
    TFX and Beam leave 850k) go to Python's permanent generation, out of the collector's way, as
    components/memory.py does for a component: each test's collection below then walks only what
    this module made (0.6 to 2 s a collection here with them, none without). After the module,
    what it made is collected once, and what outlives it (a session's shared runs, caches) is
    frozen with the rest as the next module starts. Nothing is thawed: a thaw handed all of it
    back to one more full collection per module (0.4 s each, 31 of the fast tier's 205 CPU-s),
    to find only cycles among objects that were alive as a module started and died in it.

    And TensorFlow's global seed is unset as the module starts (`_unseeded`), before the module's
    own fixtures: a reference trained once for the module (test_synchronous_training's Keras
    `fit`) read the order of its seeded shuffle from whatever seed the worker's last test left,
    and every equivalence test of the module failed against it (two fresh-clone CIs, where a
    seeding test had run before it in the same worker)."""
    _unseeded()
    gc.freeze()
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def _collect_tensorflow_garbage():
    """Each test starts with TensorFlow's global seed unset, as in a fresh process: an earlier
    test that trained in this process (train.py and equivalence.py seed it) would otherwise
    change the order a seeded shuffle gives, and so a test's figures (a bfloat16 check in
    tests/test_synchronous_training.py measured 0.63 alone, 0.76 after a seeding test, and 0.47,
    failing, in a whole suite).

    Afterwards it frees the test's garbage in cycles (traced functions holding tf.data
    iterators), as the Trainer does at its end (components/memory.py), so that no test pays for
    an earlier one's. A synchronous strategy's input frees at once since loop.py quiets its
    per-device iterators (trainer_module/strategy.py, quiet_device_iterators; before, a
    collection here waited minutes on their autotuning threads, and once for good:
    tests/test_input_teardown.py)."""
    _unseeded()
    yield
    gc.collect()


def _unseeded() -> None:
    """TensorFlow's global seed unset, as in a fresh process (where TensorFlow is imported)."""
    random = getattr(sys.modules.get(HEAVY), "random", None)  # a stand-in module has none
    if random is not None:
        random.set_seed(None)


LOCKSTEP = [sys.executable, "-m", "pipeline.cli"]


# The commands `lockstep` runs as a fork of the fork server: those that import TensorFlow & co.
# as they start (a run, verify, and reading a root's runs back: 4 to 7 CPU-s of imports each).
# `compile` imports stand-ins for them, in a fresh interpreter only (pipeline/kubeflow/).
FORKED = ("run", "verify", "runs", "report")


def lockstep(*args, cwd=None, timeout=900, env=None, fresh=False) -> subprocess.CompletedProcess:
    """Runs the real CLI in a process of its own (env: its whole environment; default ours). For
    a test about the process: its exit status as a shell sees it, signals, stderr from C++, a
    fresh interpreter's imports; else `cli`, the same command seconds sooner. The FORKED
    commands, with our environment, are a fork of a server that has imported what a run imports
    (tests/forked_cli.py: 7 CPU-seconds less a run; LOCKSTEP_TEST_FRESH_RUNS=1: none is); anything
    else, or `fresh`, a fresh interpreter (what only one shows: TensorFlow's C++ start-up lines,
    the order of the imports)."""
    argv = [str(a) for a in args]
    own = env is not None
    env = dict(os.environ if env is None else env, PYTHONPATH=str(REPO))
    forked = bool(argv) and argv[0] in FORKED
    if forked and (server := _server_for(env, own or fresh)) is not None:
        return _forked(server, argv, cwd, env, timeout)
    return subprocess.run(LOCKSTEP + argv, cwd=cwd, env=env, text=True, capture_output=True,
                          timeout=timeout)


def lockstep_started(*args, cwd=None, env=None, fresh=False):
    """`lockstep ARGS` started, not waited for, its stdout and stderr read as text as they come:
    a subprocess.Popen, or for `run` a fork server's child with the Popen methods the tests use
    (tests/forked_cli.py's Child: as `lockstep` chooses; `fresh`: never). env: variables added
    to ours."""
    argv = [str(a) for a in args]
    env = dict(os.environ, **(env or {}), PYTHONPATH=str(REPO))
    if argv[:1] == ["run"] and (server := _server_for(env, fresh)) is not None:
        return server.start(argv, cwd, env, _output_dir())
    return subprocess.Popen(LOCKSTEP + argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def python_started(*args, cwd=None, env=None, output: Path | None = None):
    """`python ARGS` (a script and its arguments, or "-m", a module and its) started, not waited
    for, its stdout and stderr together, read as text as they come: a training test's worker
    process, say. A fork of the tests' fork server where it can be one (TensorFlow and lockstep
    imported already: about 4 CPU-seconds less a process), with the Popen methods the tests use;
    else subprocess.Popen([python, *ARGS], stdout=PIPE, stderr=STDOUT, text=True). env: its whole
    environment (default ours), PYTHONPATH lockstep's root. output: a directory whose file
    `stdout` gets that output and stays (a server's log, which nobody need read as it comes: no
    pipe then, which a process that logs more than its buffer would block on)."""
    argv = [str(a) for a in args]
    env = dict(os.environ if env is None else env, PYTHONPATH=str(REPO))
    if (server := _server_for(env, False)) is not None:
        return server.start(argv, cwd, env, output or _output_dir(), python=True)
    if output is None:
        return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with open(output / "stdout", "w") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, text=True, stdout=log,
                                stderr=subprocess.STDOUT)


def _output_dir() -> Path:
    """A directory for a forked child's stdout and stderr, removed as this process ends."""
    import atexit
    import shutil
    import tempfile

    output = tempfile.mkdtemp(prefix="lockstep-output-")
    atexit.register(shutil.rmtree, output, True)
    return Path(output)


_SERVER = []  # this process's fork server (tests/forked_cli.py), once started


def _server_for(env: dict[str, str], fresh: bool):
    """The fork server, when a process with `env` can be its child: no fresh interpreter asked
    for (`fresh`, LOCKSTEP_TEST_FRESH_RUNS) and the variables read at import the server's
    (Server.serves); else None."""
    if fresh or os.environ.get("LOCKSTEP_TEST_FRESH_RUNS"):
        return None
    server = _fork_server(env)
    return server if server.serves(env) else None


def _fork_server(env):
    import atexit
    import tempfile

    from forked_cli import Server

    if not _SERVER:
        log = Path(tempfile.gettempdir()) / f"lockstep-fork-server-{os.getpid()}.log"
        _SERVER.append(Server(env, log))
        atexit.register(_SERVER[0].close)
    return _SERVER[0]


def _forked(server, argv, cwd, env, timeout):
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lockstep-output-") as output:
        result = server.run(argv, cwd, env, timeout, Path(output))
    result.args = LOCKSTEP + argv
    return result


def cli(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """The CLI's own `main` in this process, as `lockstep` runs it (the parser, the one use case
    it calls, the error's line and exit status), with what a fresh process would print on its
    stderr captured there too: log records from WARNING up and warnings (under a fresh
    interpreter's filters). cwd: the working directory during the call; env: the whole
    environment during it. No interpreter starts: 2 to 8 s less a call, more beside other work."""
    from pipeline.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _as_a_process(err, cwd, env), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        status = main([str(a) for a in args])
    return subprocess.CompletedProcess(["lockstep", *map(str, args)], status, out.getvalue(),
                                       err.getvalue())


@contextlib.contextmanager
def _as_a_process(err, cwd, env):
    """The working directory, the environment, logging as a fresh process has it (the root
    logger without handlers, and Python's last resort, from WARNING up, writing to `err` for a
    record no handler took) and how warnings show (written to `err`), each as it was
    afterwards."""
    import logging
    import warnings

    here, environ = os.getcwd(), dict(os.environ)
    root = logging.getLogger()
    handlers, last_resort = root.handlers[:], logging.lastResort
    try:
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        root.handlers[:] = []
        logging.lastResort = logging.StreamHandler(err)
        logging.lastResort.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.resetwarnings()  # then a fresh interpreter's filters
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                             ResourceWarning):
                warnings.filterwarnings("ignore", category=category, append=True)
            warnings.showwarning = lambda message, category, filename, lineno, file=None, \
                line=None: err.write(warnings.formatwarning(message, category, filename, lineno,
                                                            line))
            yield
    finally:
        root.handlers[:], logging.lastResort = handlers, last_resort
        if env is not None:
            os.environ.clear()
            os.environ.update(environ)
        os.chdir(here)


def failed_run(result: subprocess.CompletedProcess) -> str:
    """A failed `lockstep run`'s stderr, then the end of the library log it names (the traceback
    its one-line error came from): an assertion's message, what a CI log shows of a failure."""
    found = re.search(r"library logs go to (\S+)", result.stdout or "")
    log = Path(found.group(1)) if found else None
    tail = log.read_text(errors="replace")[-6000:] if log and log.is_file() else "(no log)"
    return f"{(result.stderr or '')[-3000:]}\n--- the end of {log} ---\n{tail}"


class PipelineRun:
    def __init__(self, root: Path):
        self.root = root
        self.pipeline_root = root / "pipeline_root"
        self.serving_dir = root / "serving"

    def run(self, *extra, fresh=False):
        """`lockstep run` on this root, in a process of its own (`lockstep`)."""
        return lockstep("run", *self._places(), *extra, cwd=self.root, fresh=fresh)

    def run_here(self, *extra):
        """`lockstep run` on this root through the CLI's main in this process: for a run refused
        before anything runs, where a process proves nothing more."""
        return cli("run", *self._places(), *extra, cwd=self.root)

    def _places(self):
        return "--pipeline-root", self.pipeline_root, "--serving-dir", self.serving_dir

    def pushed_versions(self) -> list[Path]:
        if not self.serving_dir.exists():
            return []
        return sorted(p for p in self.serving_dir.iterdir() if p.is_dir() and p.name.isdigit())


def shared(tmp_path_factory, name: str, make) -> tuple[Path, subprocess.CompletedProcess]:
    """(root, make(root)), made once for the whole session: make, a real run writing under root,
    returns its CompletedProcess. With workers (pytest-xdist, `make test`), the first worker to
    ask makes it under their common base directory while the others wait on a lock, then each
    reads the same files and the same result (a failed make fails each test that asks, with its
    stderr)."""
    import fcntl
    import json

    if "PYTEST_XDIST_WORKER" not in os.environ:
        root = tmp_path_factory.mktemp(name)
        return root, make(root)
    common = tmp_path_factory.getbasetemp().parent
    root, done = common / name, common / f"{name}.json"
    with open(common / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            root.mkdir()
            result = make(root)
            done.write_text(json.dumps([[str(a) for a in result.args], result.returncode,
                                        result.stdout, result.stderr]))
    args, status, out, err = json.loads(done.read_text())
    return root, subprocess.CompletedProcess(args, status, out, err)


@pytest.fixture(scope="session")
def penguins_run(tmp_path_factory):
    """One real run of the whole pipeline on the bundled data (shared by the slow tests; a test
    that runs on its root again is the one test that does: test_pipeline_e2e's cached run)."""
    def make(root):
        (root / "slices.toml").write_text('[eval]\nslices = ["island"]\n')
        # A fresh interpreter: test_pipeline_e2e reads its C++ start-up lines in the run's log.
        return PipelineRun(root).run("--config", root / "slices.toml", fresh=True)

    root, result = shared(tmp_path_factory, "penguins", make)
    assert result.returncode == 0, failed_run(result)
    run = PipelineRun(root)
    run.first = result
    return run


def penguin_parts(directory: Path, parts: int = 3) -> Path:
    """The bundled penguins CSV as `parts` CSV files of its rows in turn, in `directory`: a
    multi-file CSV, from which the ExampleGen writes several files a split."""
    lines = (REPO / "data" / "penguins" / "penguins.csv").read_text().splitlines(keepends=True)
    directory.mkdir(parents=True, exist_ok=True)
    for part in range(parts):
        (directory / f"penguins-{part}.csv").write_text(lines[0] + "".join(lines[1 + part::parts]))
    return directory


PORTABLE = ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]


# Loaded by the run's Python process (sitecustomize): records each Beam pipeline the portable
# runner runs, so the test sees which runner ran them, not only that the run succeeded.
HOOK = textwrap.dedent("""
    import os
    from apache_beam.runners.portability import portable_runner

    _run = portable_runner.PortableRunner.run_pipeline

    def run_pipeline(self, pipeline, options):
        stages = [t.full_label for t in pipeline.transforms_stack[0].parts]
        with open(os.environ["LOCKSTEP_BEAM_LOG"], "a") as log:
            log.write(stages[0].split("/")[0] + "\\n" if stages else "?\\n")
        return _run(self, pipeline, options)

    portable_runner.PortableRunner.run_pipeline = run_pipeline
""")


@pytest.fixture(scope="session")
def portable_run(tmp_path_factory):
    """One real run with two settings that touch apart (one run, many assertions), made once for
    the session (`shared`): Beam's portable runner for every Beam component, and the Trainer on 8
    emulated replicas of 8, every embedding table split over them; on the bundled data as three
    CSV files (`penguin_parts`).
    tests/test_beam_portable.py reads it for the runner and the replicas,
    tests/test_same_input.py for the model, against one device's run of the same data."""
    def make(root):
        config = root / "portable.toml"
        config.write_text("beam_args = [" + ", ".join(f'"{a}"' for a in PORTABLE) + "]\n"
                          "[trainer]\nemulate_replicas = 8\nper_replica_batch = 8\n"
                          # Every embedding table split by rows over the 8 replicas
                          # (trainer_module/sharded_embedding.py).
                          "shard_embeddings_over = 0\n"
                          # Island's, sex's and year's tables trained (PENGUIN_TABLES_TRAINED).
                          f"embedding_min_rows = {PENGUIN_TABLES_TRAINED}\n")
        hook = root / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(HOOK)
        # Beam's temporary directories (the portable runner's staging, which it does not remove)
        # in the run's own.
        (root / "tmp").mkdir()
        env = dict(os.environ, PYTHONPATH=f"{hook}:{REPO}", LOCKSTEP_BEAM_LOG=str(root / "beam.log"),
                   TMPDIR=str(root / "tmp"))
        run = PipelineRun(root)
        return subprocess.run(
            LOCKSTEP + ["run", "--config", str(config), "--data", str(penguin_parts(root / "data")),
                        "--pipeline-root", str(run.pipeline_root),
                        "--serving-dir", str(run.serving_dir), "--verbose"],
            cwd=root, env=env, text=True, capture_output=True, timeout=900)

    root, result = shared(tmp_path_factory, "portable", make)
    assert result.returncode == 0, result.stderr[-3000:]
    run = PipelineRun(root)
    run.result, run.beam_log = result, root / "beam.log"
    return run


WIDE_DEEP = REPO / "examples" / "wide_deep"


@pytest.fixture(scope="session")
def wide_deep_runs(tmp_path_factory):
    """examples/wide_deep (a user's own model and preprocessing by dotted path, trainer.verify
    on) as benchmarks/kfp_local.py --smoke runs it, made once for the session (`shared`): its
    LocalDagRunner run (`local`, tests/test_example.py's) and its `--orchestrator kfp-local` run
    (`kfp`, tests/test_kfp_local.py's: the suite's one kfp.local run of the whole spec), each a
    PipelineRun whose `result` has the run's stdout; and the benchmark's own output
    (`benchmark`). Each run is `lockstep run` in a fresh interpreter, with the example's config
    and data, as a user runs it."""
    from types import SimpleNamespace

    from test_benchmarks import smoke_failed, smoke_process

    def make(root):
        return smoke_process("kfp_local.py", root, "--config", WIDE_DEEP / "config.toml",
                             "--data", WIDE_DEEP / "data" / "credit_data.csv",
                             "--work", root / "bench", timeout=2400)[0]  # three runs

    root, result = shared(tmp_path_factory, "wide-deep", make)
    assert result.returncode == 0, smoke_failed("kfp_local.py", root, result)
    runs = {}
    for name in ("local", "kfp"):
        run = runs[name] = PipelineRun(root / "bench" / name)
        run.result = subprocess.CompletedProcess(
            f"lockstep run ({name})", 0, (run.root / "stdout.txt").read_text(), "")
    return SimpleNamespace(benchmark=result.stdout, **runs)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """One real `lockstep compile` for a v5e-4 Trainer, with spans and remote data and models."""
    root, result = shared(tmp_path_factory, "compile", _compile)
    assert result.returncode == 0, result.stderr[-3000:]
    return {"root": root, "config": root / "kfp.toml", "output": root / "out" / "pipeline.yaml",
            "result": result}


def _compile(root):
    config = root / "kfp.toml"
    config.write_text(
        'beam_args = ["--runner=DataflowRunner", "--region=europe-west4"]\n'
        '[data]\npath = "gs://lockstep-test/data"\nspan_pattern = "span-{SPAN}/*.csv"\n'
        'task = "classification"\n[eval]\nbounds = {accuracy = 0.8}\n[trainer]\n'
        'tpu_slice = "v5e-4"\nper_replica_batch = 128\n'
        '[paths]\nserving_dir = "gs://lockstep-test/serving"\n')
    return lockstep("compile", "--config", config, "--pipeline-root", root / "pipeline_root",
                    "--output", root / "out" / "pipeline.yaml", cwd=root)


# trainer.embedding_min_rows for the tests that check what the tables' rows do (split over the
# replicas or the servers, resumed, refit), pinned whatever the default: at 20 island's, sex's
# and year's tables train (three values of about 84 fit rows each), and the integer columns'
# codes (a few rows a value) are statistics alone; at 100 every table of penguins would be its
# statistics alone, its rows left out of the model, and a wrong row or gradient could not show.
PENGUIN_TABLES_TRAINED = 20.0


def penguins_job(penguins_run, out_dir, **trainer):
    """A TrainJob on the shared penguins run's examples and transform graph, writing under
    out_dir; trainer: TrainerConfig fields (embedding_min_rows: PENGUIN_TABLES_TRAINED unless
    given)."""
    trainer.setdefault("embedding_min_rows", PENGUIN_TABLES_TRAINED)
    import glob

    from trainer_module.job import TrainJob
    from trainer_module.settings import CLASSIFICATION, TrainerConfig
    from trainer_module.custom_config import TrainSpec

    root = penguins_run.pipeline_root
    # The newest transform graph (a run on a copy of the root may have made another).
    transform_dir = max(glob.glob(str(root / "Transform" / "transform_graph" / "*")),
                        key=os.path.getmtime)
    examples = glob.glob(str(root / "CsvExampleGen" / "examples" / "*"))[0]
    return TrainJob(train_files=[f"{examples}/Split-train/*"],
                    eval_files=[f"{examples}/Split-eval/*"], transform_dir=transform_dir,
                    model_run_dir=str(out_dir / "run"), serving_model_dir=str(out_dir / "serving"),
                    spec=TrainSpec("species", CLASSIFICATION, TrainerConfig(**trainer)))


def eval_examples(files, label):
    """Raw serialized tf.Examples of ExampleGen's eval split, label removed, and the labels
    (None where the example has none)."""
    import tensorflow as tf

    assert files
    serialized, labels = [], []
    for record in tf.data.TFRecordDataset(sorted(map(str, files)), compression_type="GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        value = example.features.feature[label]
        kind = value.WhichOneof("kind")
        values = getattr(value, kind).value if kind else []
        labels.append(None if not values else
                      values[0].decode() if kind == "bytes_list" else values[0])
        del example.features.feature[label]
        serialized.append(example.SerializeToString())
    return serialized, labels


def serving_accuracy(version, files, label="species") -> float:
    """Accuracy of a pushed model called the way a server would: raw serialized tf.Examples."""
    import numpy as np
    import tensorflow as tf

    model = tf.saved_model.load(str(version))
    assert {"serving_default", "transform_features"} <= set(model.signatures)
    serialized, labels = eval_examples(files, label)
    out = model.signatures["serving_default"](examples=tf.constant(serialized))
    predicted = [c.decode() for c in out["classes"].numpy()]
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    return float(np.mean([p == str(x) for p, x in zip(predicted, labels)]))

