"""What lockstep does, one function each: prepare a run (check the data, take the decisions), run
it here (LocalDagRunner, or the compiled spec under kfp.local), compile it for Kubeflow, submit
and schedule it there (or in the local crontab), plan the training, and read a past run back.

No argparse and no print: the CLI turns flags into a Config, calls one of these and prints what
comes back; tests call them directly. Heavy imports (TFX, TensorFlow, kfp) happen inside the
functions that need them, so preparing a run reads the CSVs before TensorFlow loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import threading
import time

from pipeline import errors, preflight, split_check
from pipeline.config import Config, ConfigError

LOCAL, KFP_LOCAL = "local", "kfp-local"
ORCHESTRATORS = (LOCAL, KFP_LOCAL)
TREND_RUNS = 20  # past runs in a report's trend

@dataclasses.dataclass(frozen=True)
class Prepared:
    """A run, checked and decided, before anything runs.

    Attributes:
      config: the config, absolutized.
      data: the data check's DataInfo (pipeline/data_check.py); None for remote data.
      decisions: the task, the columns' roles and the gate (pipeline/preflight.py).
      drift: how far the newest span moved from the one before it, or None.
      skew: how the train and eval rows compare (pipeline/split_check.py), or None.
    """

    config: Config
    data: object
    decisions: preflight.Decisions
    drift: preflight.DriftCheck | None = None
    code: tuple[str, ...] = ()  # what the check of the user's own code said (preflight.check_hooks)
    skew: split_check.SkewCheck | None = None

    @property
    def task(self) -> str:
        return f"{self.decisions.task} ({self.decisions.task_reason})"

    def lines(self) -> list[str]:
        """What a run says before it starts: the data, the columns that are not features and
        the gate."""
        lines = []
        if self.data is not None:
            data = self.data
            spans = f" of span(s) {', '.join(map(str, data.spans))}" if data.spans else ""
            lines.append(f"lockstep: {data.rows} rows from {len(data.files)} CSV file(s){spans}, "
                         f"label '{self.config.data.label}', {len(data.columns) - 1} columns; "
                         f"task {self.task}")
        return (lines + (self.skew.lines() if self.skew else []) + self.decisions.column_lines()
                + [self.decisions.gate_line()] + list(self.code))


def prepare(config: Config) -> Prepared:
    """Checks local data (remote data is not read) and takes the decisions a run or a compile
    is built from.

    Raises:
      ConfigError, CsvError, SpanError: the config, the user's code or the data, named.
      SkewError: the train and eval rows differ past data.max_skew, the column named.
      StorageError: a local pipeline root or serving dir is read-only or lacks room.
    """
    data = preflight.check_local(config)
    decisions = preflight.decide(config, data)
    skew = preflight.check_skew(config, data, decisions)
    prepared = Prepared(config, data, decisions,
                        code=tuple(preflight.check_hooks(config, decisions, data)), skew=skew)
    check_storage(prepared)
    return prepared


def check_drift(prepared: Prepared) -> Prepared:
    """For data in spans: measures how far the newest complete span moved from the one before it
    (Arrow only, before TensorFlow loads); the result is the run's `drift`.

    Raises:
      DriftError: a feature moved past its bound, named with its score.
    """
    return dataclasses.replace(prepared,
                               drift=preflight.check_drift(prepared.config, prepared.data))


def nothing_new(prepared: Prepared) -> str | None:
    """The line to say when the complete spans a run would read are those the serving model was
    trained on (so there is nothing to run), else None."""
    return preflight.nothing_new(prepared.config, prepared.data)


def log_path(config: Config) -> str:
    """A new run's log file: <pipeline root>/logs/run-<UTC time>.log."""
    return os.path.join(config.paths.pipeline_root, "logs",
                        time.strftime("run-%Y%m%dT%H%M%SZ.log", time.gmtime()))


@dataclasses.dataclass
class Outcome:
    """What a run did: its report (pipeline/reporting/run_report.py), its page, its time."""

    report: object
    page: str | None
    page_error: str | None
    seconds: float


def run(prepared: Prepared, *, orchestrator: str = LOCAL, log_file: str | None = None,
        verbose: bool = False, lock: str | None = None) -> Outcome:
    """Runs the pipeline here under the pipeline root's lock, with the console showing it.

    Args:
      prepared: what prepare() returned.
      orchestrator: "local" (TFX's LocalDagRunner, in this process) or "kfp-local" (the compiled
        spec under kfp.local, each task a process).
      log_file: where library logs go (default: log_path(config)); verbose: show them here.
      lock: the run lock (default: <pipeline root>/run.lock).
    Raises:
      run_lock.Locked: another run holds the lock; errors.PipelineFailed: a component failed
      (its last line); the project's own errors (pipeline/errors.py) unchanged.
    """
    from absl import logging as absl_logging

    from pipeline.local import run_lock
    from pipeline.local.console import Console

    if orchestrator not in ORCHESTRATORS:
        raise ConfigError(f"orchestrator must be one of {', '.join(ORCHESTRATORS)}, "
                          f"got {orchestrator!r}")
    config = prepared.config
    check_storage(prepared, remote=True)
    log_file = log_file or log_path(config)
    absl_logging.set_verbosity(absl_logging.INFO)  # all of it to the log file (or, -v, here)
    tic = time.perf_counter()
    _watchdog(config.run.timeout_minutes)
    try:
        with run_lock.hold(lock or run_lock.default_path(config.paths.pipeline_root),
                           config.run.lock_wait_seconds), \
                Console(log_file, verbose) as console:
            report = _orchestrate(prepared, orchestrator, console)
    except Exception as err:  # noqa: BLE001  a component failed: its error, whatever it is
        if errors.status_of(err) is not None:  # the project's own: unchanged
            raise
        raise _failed(err, "pipeline run failed", config) from err
    report.task = prepared.task
    report.drift = prepared.drift.to_dict() if prepared.drift else {}
    report.skew = prepared.skew.to_dict() if prepared.skew else {}
    page, page_error = write_page(report, config, log_file)
    return Outcome(report, page, page_error, time.perf_counter() - tic)


def check_storage(prepared: Prepared, serving: bool = True, remote: bool = False) -> None:
    """The pipeline root (and the serving dir) take a file and have room for the run
    (pipeline/storage.py). prepare() checks the local places, run() the object-store ones (a
    compile makes no write there). Raises StorageError naming the place."""
    from pipeline import storage

    config = prepared.config
    input_bytes = sum(os.path.getsize(f) for f in prepared.data.files) if prepared.data else 0
    places = storage.places(config.paths.pipeline_root, config.paths.serving_dir, input_bytes)
    storage.check([p for p in (places if serving else places[:1])
                   if storage.fs.is_uri(p.path) == remote])


def _failed(err: Exception, what: str, config: Config | None = None) -> errors.PipelineFailed:
    """A failure inside a run that is not one of the project's own errors, in one line: what
    failed, the error's type and its last line; a full disk says which place and what to do."""
    lines = str(err).strip().splitlines()
    last = lines[-1] if lines else ""
    if config is not None:
        from pipeline import storage

        full = storage.out_of_space(str(err), storage.places(
            config.paths.pipeline_root, config.paths.serving_dir, 0))
        if full:
            return errors.PipelineFailed(f"{what}: {full} ({type(err).__name__}: {last[:160]})")
    return errors.PipelineFailed(f"{what}: {type(err).__name__}: {last}")


def _orchestrate(prepared: Prepared, orchestrator: str, console):
    config = prepared.config
    if config.trainer.emulate_replicas > 1:
        # Before TensorFlow starts: with LocalDagRunner the Trainer runs in this process.
        from trainer_module.strategy import configure_emulated_replicas

        configure_emulated_replicas(config.trainer.emulate_replicas)
    if orchestrator == KFP_LOCAL:
        from pipeline.local import kfp_local

        console.line("lockstep: compiling, then running the spec under kfp.local, each task a "
                     "process of its own")

        def task_line(record):
            console.line(f"  {record.task:<20} {'done' if record.succeeded else 'FAILED':<7} "
                         f"{record.seconds:6.1f}s (start-up {record.start_seconds:.1f}s)")

        return kfp_local.run_config(config, on_task=task_line).report()
    from pipeline.local import node_worker

    worker = node_worker.Worker.if_useful()  # its imports beside this process's
    try:
        from pipeline.local import dag_runner
    except BaseException:
        if worker is not None:
            worker.close()
        raise
    return _run_locally(prepared, console, worker)


def _run_locally(prepared: Prepared, console, worker=None, to_node: str | None = None):
    """dag_runner.run, and once more without the cache for a producer whose cached output does
    not read (components/integrity.py): its node runs again, saying why. Raises the node's own
    error otherwise, or a second read error naming the file."""
    from components import integrity
    from pipeline import pipeline as pipeline_lib
    from pipeline.local import dag_runner
    from pipeline.reporting import metadata_store

    config, data = prepared.config, prepared.data
    producer = pipeline_lib.EXAMPLE_GEN_NODE
    uncached: tuple[str, ...] = ()
    while True:
        try:
            return dag_runner.run(config, data.input_base, data.pattern, prepared.decisions,
                                  to_node=to_node, worker=worker, uncached=uncached)
        except dag_runner.NodeFailed as failed:
            worker = None  # closed by that run; the next starts its own
            if not integrity.is_read_error(failed.error):
                raise failed.error from None
            examples = metadata_store.report(config, failed.run_id).artifacts.get(
                f"{producer}.examples")
            found = integrity.corrupt_file(examples) if examples else None
            if found is None:
                raise errors.PipelineFailed(
                    f"{failed.node} could not read its input ({type(failed.error).__name__}), "
                    f"and every file of {producer}'s output {examples} reads whole") from None
            path, why = found
            if uncached:
                raise errors.PipelineFailed(
                    f"{producer}'s output is corrupt again after it ran anew: {path} ({why}); "
                    "check the disk under the pipeline root") from None
            console.line(f"lockstep: {failed.node} could not read {producer}'s cached output: "
                         f"{path} is corrupt ({why}); running {producer} again, not from the "
                         "cache")
            uncached = (producer,)


def verify(prepared: Prepared, *, replicas: int = 2, steps: int = 3, workers: int = 1,
           log_file: str | None = None, lock: str | None = None):
    """`lockstep verify`: the pipeline up to Transform (a partial LocalDagRunner run, cached like
    a whole run's), then the user's model and loss on that input: `replicas` emulated replicas
    against Keras on one device on the global batch, for `steps` global steps, in a fresh
    process, or in `workers` processes with one replica each (trainer_module/equivalence.py).
    Returns its Verification.

    Raises:
      ConfigError: remote data (verify reads local data); run_lock.Locked; PipelineFailed.
    """
    from pipeline.local import run_lock
    from pipeline.local.console import Console

    config, data = prepared.config, prepared.data
    if data is None:
        raise ConfigError(f"data.path {config.data.path} is remote: lockstep verify reads "
                          "local data (a sample of it will do)")
    log_file = log_file or log_path(config)
    try:
        with run_lock.hold(lock or run_lock.default_path(config.paths.pipeline_root),
                           config.run.lock_wait_seconds), Console(log_file, False) as console:
            from pipeline import pipeline as pipeline_lib  # TensorFlow & co., their logs to the file
            from trainer_module import equivalence
            from trainer_module.job import TrainJob

            report = _run_locally(prepared, console, to_node=pipeline_lib.TRANSFORM_NODE)
    except Exception as err:  # noqa: BLE001  as run(): a component's error in one line
        if errors.status_of(err) is not None:  # the project's own: unchanged
            raise
        raise _failed(err, "verify: the pipeline up to Transform failed", config) from err
    examples = report.artifacts[f"{pipeline_lib.EXAMPLE_GEN_NODE}.examples"]
    job = TrainJob(
        train_files=[f"{examples}/Split-train/*"], eval_files=[],
        transform_dir=report.artifacts[f"{pipeline_lib.TRANSFORM_NODE}.transform_graph"],
        model_run_dir="", serving_model_dir="", label=config.data.label,
        task=prepared.decisions.task,
        trainer=pipeline_lib.train_spec(config, config.data.label, prepared.decisions.task).trainer)
    return equivalence.run_in_subprocess(job, replicas=replicas, steps=steps, workers=workers)


def _watchdog(minutes: float) -> threading.Timer | None:
    """After `minutes`, says so on the real stderr and ends the process with status 4 (the
    kernel releases the run lock). Started before the console redirects fd 2."""
    if not minutes:
        return None
    terminal = os.dup(2)

    def stop():
        os.write(terminal, (f"lockstep: error: the run took longer than {minutes:g} min "
                            "(run.timeout_minutes); stopped\n").encode())
        os._exit(errors.TIMED_OUT)

    timer = threading.Timer(minutes * 60, stop)
    timer.daemon = True
    timer.start()
    return timer


def report_directory(config: Config) -> str:
    return os.path.join(config.paths.pipeline_root, "reports")


def write_page(report, config: Config, log_file: str = os.devnull,
               history: list | None = None, directory: str | None = None
               ) -> tuple[str | None, str | None]:
    """The run's HTML report page, with the trend over past local runs.

    Returns:
      (path, None), or (None, the error) when it could not be written: the run's result stands
      without its page.
    """
    from pipeline.local.console import Console

    try:
        with Console(log_file):  # matplotlib's and TensorFlow's chatter, to the run's log
            from pipeline.reporting import metadata_store
            from pipeline.reporting import page

            if history is None:
                history = metadata_store.history(config, TREND_RUNS)
            return page.write(report, directory or report_directory(config), history), None
    except Exception as err:  # noqa: BLE001  reported, not raised
        return None, f"{type(err).__name__}: {err}"


def past_run(config: Config, run_id: str | None = None):
    """One past run's report (default: the newest) and the runs up to it, newest first.

    Raises:
      LookupError: no runs, or no run of that id.
    """
    from pipeline.local.console import Console

    if not os.path.exists(config.metadata_path):
        raise LookupError(f"no runs in {config.metadata_path}")
    with Console(os.devnull):  # TensorFlow's and TFMA's import chatter
        from pipeline.reporting import metadata_store

        report = metadata_store.report(config, run_id)
        history = [r for r in metadata_store.history(config) if r.started <= report.started]
    return report, history[:TREND_RUNS]


def past_runs(config: Config, limit: int) -> list:
    """The newest `limit` runs' reports from ML Metadata, newest first."""
    from pipeline.local.console import Console

    with Console(os.devnull):  # TFMA's and TensorFlow's import chatter
        from pipeline.reporting import metadata_store

        return metadata_store.history(config, max(limit, 0))


@dataclasses.dataclass(frozen=True)
class Compilation:
    """compile_spec's result: the spec written to `output`, or `fallback`: why compiling with
    import stand-ins failed, so it must run again in a fresh process with the real imports."""

    output: str
    compiled: object = None
    seconds: float = 0.0
    fallback: str = ""


def compile_spec(config: Config, output: str, image: str | None = None) -> Compilation:
    """Compiles the Kubeflow Pipelines v2 spec for this config to `output`, atomically.

    Local data is read, as before a run, for the task, the columns' roles and the gate's
    baselines; remote data is not: they come from the config. TensorFlow & co. are replaced by
    stand-ins (pipeline/kubeflow/import_stubs.py) for a compile of seconds.

    Raises:
      ConfigError (and CompileError): a setting that cannot be compiled, named.
    """
    from pipeline.kubeflow import import_stubs

    decisions = prepare(config).decisions
    tic = time.perf_counter()
    stubbed = import_stubs.install()
    try:
        from pipeline.kubeflow import compiler

        compiled = compiler.compile_pipeline(config, decisions, image)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001  any failure of a stand-in: compile for real
        if not stubbed:
            raise
        first = str(err).splitlines()[0] if str(err) else ""
        return Compilation(output, fallback=f"{type(err).__name__}: {first}")
    compiler.write(compiled, output)
    return Compilation(output, compiled, time.perf_counter() - tic)


def compile_without_stand_ins(argv: list[str]) -> int:
    """Runs `lockstep <argv>` again in a fresh process with the stand-ins off; its exit status."""
    import subprocess

    from pipeline.kubeflow import import_stubs

    env = dict(os.environ, **{import_stubs.DISABLE_ENV: "1"})
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *argv], env=env).returncode


@dataclasses.dataclass(frozen=True)
class Size:
    """One size to plan for: a label, its replicas, and whether they are TPU cores."""

    label: str
    replicas: int
    on_tpu: bool


def plan(config: Config, sizes: list[Size], rows: int | None = None, like: Size | None = None):
    """The training plan for each size, from the config's trainer settings.

    Args:
      sizes: what to plan for (sizes_for()); rows: the training split's rows when the steps
        come from the data (train_rows()).
      like: a larger size each of `sizes` rehearses: each accumulates the micro-batches that make
        its global batch (so learning rate and steps) the larger one's, which comes last.
    Returns:
      [(label, scaling.Plan)], in the order of `sizes` (then `like`).
    Raises:
      scaling.ScalingError: `like`'s replicas are not a multiple of a size's.
    """
    from trainer_module import scaling

    if like is None:
        return [(s.label, scaling.make_plan(config.trainer, s.replicas, s.on_tpu, rows))
                for s in sizes]
    plans = []
    for s in sizes + [like]:
        trainer = dataclasses.replace(config.trainer,
                                      accumulation_steps=scaling.like(s.replicas, like.replicas))
        plans.append((s.label, scaling.make_plan(trainer, s.replicas, s.on_tpu, rows)))
    return plans


def sizes_for(config: Config, slices: list[str] | None = None,
              replicas: int | None = None) -> list[Size]:
    """The sizes asked for: TPU slice presets, a replica count, or else the config's own.

    Raises:
      ConfigError: a replica count below 1; SliceError: an unknown slice, named.
    """
    from trainer_module import slices as slices_lib

    if replicas is not None:
        if replicas < 1:
            raise ConfigError(f"replicas must be at least 1, got {replicas}")
        return [Size(f"{replicas} replicas", replicas, False)]
    names = slices or ([config.trainer.tpu_slice] if config.trainer.tpu_slice else [])
    if names:
        return [Size(s.name, s.replicas, True) for s in map(slices_lib.get, names)]
    count = max(config.trainer.emulate_replicas, 1)
    return [Size(f"{count} replica(s)", count, False)]


def train_rows(config: Config, rows: int | None = None) -> tuple[int | None, str]:
    """The training split's rows when the steps or the batch come from the data, and where that
    came from: `rows` if given, else counted in data.path times the train split's share of the
    buckets."""
    from trainer_module import scaling

    if not scaling.needs_rows(config.trainer):
        return None, ""
    if rows is not None:
        if rows < 1:
            raise ConfigError(f"rows must be at least 1, got {rows}")
        return rows, f"Training rows: {rows} (--rows)"
    from pipeline import data_check

    data = data_check.check(config.data)
    train, evaluation = config.data.train_buckets, config.data.eval_buckets
    count = data.rows * train // (train + evaluation)
    return count, (f"Training rows: about {count} ({train} of {train + evaluation} hash buckets "
                   f"of the {data.rows} rows in {config.data.path})")


# ------------------------------------------------------ Kubeflow Pipelines: submit and schedule

@dataclasses.dataclass(frozen=True)
class KfpAccess:
    """Which KFP server, as who, where: what the flags say (None: the config's value, or the
    environment's; pipeline/kubeflow/client.py resolves host and token)."""

    host: str | None = None
    token_file: str | None = None  # a file holding the bearer token, or "-" for stdin
    namespace: str | None = None
    experiment: str | None = None
    service_account: str | None = None


def kfp_target(config: Config, access: KfpAccess):
    """The KFP server to talk to (kubeflow/client.py's Target).

    Raises:
      ConfigError: a token would go to a host the user did not name, or over plain HTTP.
    """
    from pipeline.kubeflow import client

    k = config.kubeflow
    token = client.resolve_token(access.token_file)
    try:
        host = client.resolve_host(access.host, k.host, with_token=bool(token))
    except client.UnsafeEndpoint as err:
        raise ConfigError(str(err)) from None
    return client.Target(host=host, token=token, namespace=access.namespace or k.namespace,
                         experiment=access.experiment or k.experiment,
                         service_account=access.service_account or k.service_account)


@contextlib.contextmanager
def spec_package(config: Config, package: str | None = None, image: str | None = None):
    """The spec to send: `package` (a `lockstep compile` output), or one compiled now in a
    fresh process and removed after."""
    if package:
        yield package
        return
    from pipeline.kubeflow import compiler

    directory = tempfile.mkdtemp(prefix="lockstep-")
    try:
        path = os.path.join(directory, "pipeline.yaml")
        compiler.compile_in_fresh_process(config, path, image=image)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_parameters(package: str, pairs: list[str] | None) -> dict:
    """NAME=VALUE pairs as the spec's declared parameters, typed.

    Raises:
      ConfigError: a name the spec does not declare, or a value of the wrong type.
    """
    from pipeline.kubeflow import client

    try:
        return client.parse_params(pairs, client.declared_parameters(package))
    except client.KfpError as err:
        raise ConfigError(str(err)) from None


@dataclasses.dataclass(frozen=True)
class Submitted:
    run_id: str
    run_name: str
    where: str  # the experiment, or Vertex AI
    url: str = ""


def submit(config: Config, access: KfpAccess, *, package: str | None = None,
           image: str | None = None, params: list[str] | None = None,
           pipeline_root: str | None = None, run_name: str | None = None,
           vertex: tuple[str, str] | None = None) -> Submitted:
    """One run of the pipeline on KFP, or on Vertex AI Pipelines (vertex: project, region).

    Raises:
      ConfigError: a bad parameter or endpoint; KfpError: the server refused or failed.
    """
    from datetime import datetime, timezone

    from pipeline.kubeflow import client

    run_name = run_name or f"{config.pipeline_name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    with spec_package(config, package, image) as spec:
        values = run_parameters(spec, params)
        if vertex:
            name = client.submit_vertex(spec, *vertex, run_name, values,
                                        pipeline_root or config.paths.pipeline_root,
                                        access.service_account or config.kubeflow.service_account)
            return Submitted(name, run_name, "Vertex AI Pipelines")
        target = kfp_target(config, access)
        run_id = client.submit(target, spec, run_name, values, pipeline_root)
    return Submitted(run_id, run_name, target.experiment, client.run_url(target, run_id))


@dataclasses.dataclass(frozen=True)
class Scheduled:
    name: str
    job_id: str
    action: str = "created"  # with apply: created | unchanged | replaced
    replaced: tuple[str, ...] = ()


def schedule(config: Config, access: KfpAccess, cron: str, *, name: str | None = None,
             max_concurrency: int = 1, catch_up: bool = False, apply: bool = False,
             package: str | None = None, image: str | None = None,
             params: list[str] | None = None, pipeline_root: str | None = None) -> Scheduled:
    """A recurring run on KFP (cron: 6 fields, UTC). apply: make the recurring run of this name
    match: create it, leave it, or replace it.

    Raises:
      ConfigError: a bad cron, parameter or endpoint; KfpError: the server refused or failed.
    """
    from pipeline.kubeflow import client

    name = name or f"{config.pipeline_name}-retrain"
    with spec_package(config, package, image) as spec:
        values = run_parameters(spec, params)
        target = kfp_target(config, access)
        if apply:
            action, job_id, removed = client.apply_schedule(
                target, spec, name, cron, values, max_concurrency, catch_up, pipeline_root)
            return Scheduled(name, job_id, action, tuple(removed))
        job_id = client.schedule(target, spec, name, cron, values, max_concurrency, catch_up,
                                 pipeline_root)
    return Scheduled(name, job_id)


def schedules(config: Config, access: KfpAccess, action: str = "list",
              schedule_id: str | None = None) -> list:
    """list: the recurring runs (kubeflow/client.py's Schedule); pause | resume | delete: that
    one (returns [])."""
    from pipeline.kubeflow import client

    target = kfp_target(config, access)
    if action == "list":
        return client.list_schedules(target)
    client.change_schedule(target, action, schedule_id)
    return []


def schedule_locally(config: Config, config_path: str | None, cron: str,
                     name: str | None = None) -> str:
    """A crontab entry (5 fields, machine local time) that runs `lockstep run` under the lock;
    returns the line installed."""
    from pipeline.local import schedule as local_schedule

    log = os.path.join(config.paths.pipeline_root, "logs", "schedule.log")
    line = local_schedule.entry(name or config.pipeline_name, cron, config_path, os.getcwd(),
                                log=log)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    local_schedule.install(name or config.pipeline_name, line)
    return line


def unschedule_locally(config: Config, name: str | None = None) -> bool:
    """Removes the crontab entry; whether there was one."""
    from pipeline.local import schedule as local_schedule

    return local_schedule.remove(name or config.pipeline_name)
