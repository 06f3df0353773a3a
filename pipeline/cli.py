"""The `lockstep` command line. Heavy imports happen inside each command, after the environment
is set (legacy Keras, quiet TensorFlow), so `lockstep --help` is instant."""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _fail(message: str, status: int) -> int:
    print(f"lockstep: error: {message}", file=sys.stderr)
    return status


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML or YAML config file (see README); flags override it")


def _run_overrides(args) -> dict:
    return {
        "data.path": args.data, "data.label": args.label,
        "paths.pipeline_root": args.pipeline_root, "paths.serving_dir": args.serving_dir,
        "enable_cache": False if args.no_cache else None,
        "trainer.emulate_replicas": args.emulate_replicas,
        "trainer.train_steps": args.train_steps,
    }


def _maybe_lock(path: str | None):
    import contextlib

    from pipeline.local_schedule import run_lock

    return run_lock(path) if path else contextlib.nullcontext()


def cmd_run(args) -> int:
    from absl import logging as absl_logging

    from components.csv_format import CsvError
    from pipeline import config as config_lib, data_check

    try:
        config = config_lib.absolutize(config_lib.load(args.config, _run_overrides(args)))
        data = data_check.check(config.data.path, config.data.label, config.data.missing_values,
                                config.data.span_pattern, config.data.span_window)
    except (config_lib.ConfigError, CsvError) as err:
        return _fail(str(err), 2)
    absl_logging.set_verbosity(absl_logging.INFO if args.verbose else absl_logging.WARNING)
    if config.trainer.emulate_replicas > 1:
        # Must happen before TensorFlow starts: the Trainer runs in this process.
        from trainer_module.strategy import configure_emulated_replicas

        configure_emulated_replicas(config.trainer.emulate_replicas)
    spans = f" of span(s) {', '.join(map(str, data.spans))}" if data.spans else ""
    print(f"lockstep: {data.rows} rows from {len(data.files)} CSV file(s){spans}, label "
          f"'{config.data.label}' ({data.task}), {len(data.columns) - 1} features", flush=True)
    from components.example_validator import AnomaliesFound
    from pipeline import kfp_local, local_runner
    from pipeline.local_schedule import Locked

    # TFX's Beam executors parse sys.argv with absl flags (so `-v` would become --verbosity).
    sys.argv = sys.argv[:1]
    tic = time.perf_counter()
    task = data.task if config.data.task == "auto" else config.data.task
    try:
        with _maybe_lock(args.lock):
            if args.orchestrator == "kfp-local":
                report = _run_kfp_local(config, task)
            else:
                report = local_runner.run(config, data.input_base, data.pattern, task)
    except Locked as err:
        print(f"lockstep: {err}", file=sys.stderr)
        return 0
    except AnomaliesFound as err:
        return _fail(str(err), 1)
    except kfp_local.KfpLocalError as err:  # a task failed: it is named, with its log
        return _fail(str(err), 1)
    except Exception as err:  # a component failed: one line, the cause last
        message = str(err).strip().splitlines()
        return _fail(f"pipeline run failed: {type(err).__name__}: "
                     f"{message[-1] if message else ''}", 1)
    print(report.describe())
    print(f"Total: {time.perf_counter() - tic:.1f}s")
    return 0


def _run_kfp_local(config, task: str):
    """Compiles the spec and runs it under kfp.local (pipeline/kfp_local.py), a line per task."""
    from pipeline import kfp_local

    print("lockstep: compiling, then running the spec under kfp.local, each task a process of "
          "its own", flush=True)

    def task_line(record):
        print(f"  {record.task:<20} {'done' if record.succeeded else 'FAILED':<7} "
              f"{record.seconds:6.1f}s (start-up {record.start_seconds:.1f}s)", flush=True)

    return kfp_local.run_config(config, task, on_task=task_line).report()


def _task_for_compile(config) -> str:
    """The task without reading remote data: from config, else from local data."""
    from pipeline import config as config_lib

    if config.data.task != "auto":
        return config.data.task
    if config_lib.is_uri(config.data.path):
        raise UsageError(f"data.path {config.data.path} is remote and compile reads no remote "
                         "data: set data.task to classification or regression")
    from components.csv_format import CsvError
    from pipeline import data_check

    try:
        return data_check.check(config.data.path, config.data.label, config.data.missing_values,
                                config.data.span_pattern, config.data.span_window).task
    except CsvError as err:
        raise UsageError(str(err)) from None


class _RealImportsNeeded(Exception):
    """Compiling with import stand-ins failed: compile again, in a fresh process, for real."""

    def __init__(self, cause: BaseException):
        super().__init__(cause)
        self.cause = cause

    def recompile(self, argv: list[str]) -> int:
        import subprocess

        from pipeline import import_stubs

        print(f"lockstep: compiling with import stand-ins failed ({type(self.cause).__name__}: "
              f"{str(self.cause).splitlines()[0] if str(self.cause) else ''}); compiling again "
              "with the real imports", file=sys.stderr)
        env = dict(os.environ, **{import_stubs.DISABLE_ENV: "1"})
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *argv], env=env).returncode


def _compile(config, task: str, image: str | None):
    """compile_pipeline with TensorFlow & co. replaced by stand-ins (pipeline/import_stubs.py);
    a CompileError is the user's, any other failure means: compile with the real imports."""
    from pipeline import import_stubs

    stubbed = import_stubs.install()
    try:
        from pipeline import kubeflow_runner

        return kubeflow_runner.compile_pipeline(config, task, image)
    except Exception as err:
        from pipeline.config import ConfigError

        if isinstance(err, ConfigError) or not stubbed:  # the user's error, or a real failure
            raise
        raise _RealImportsNeeded(err) from err


def cmd_compile(args) -> int:
    from pipeline import config as config_lib

    overrides = {"data.path": args.data, "paths.pipeline_root": args.pipeline_root,
                 "paths.serving_dir": args.serving_dir, "trainer.tpu_slice": args.slice}
    try:
        config = config_lib.absolutize(config_lib.load(args.config, overrides))
    except config_lib.ConfigError as err:
        return _fail(str(err), 2)
    task = _task_for_compile(config)
    tic = time.perf_counter()
    try:
        compiled = _compile(config, task, args.image)
    except config_lib.ConfigError as err:  # incl. kubeflow_runner.CompileError
        return _fail(str(err), 2)
    except _RealImportsNeeded as err:
        return err.recompile(args.argv)
    from pipeline import kubeflow_runner

    kubeflow_runner.write(compiled, args.output)
    trainer = config.trainer.tpu_slice or (f"{config.kubeflow.gpus} GPU(s)" if config.kubeflow.gpus
                                           else "CPU")
    print(f"lockstep: wrote {args.output} ({len(compiled.pipeline_spec.root.dag.tasks)} tasks, "
          f"image {compiled.image}, Trainer on {trainer}) in {time.perf_counter() - tic:.1f}s")
    return 0


def _target(args, config):
    from pipeline import kubeflow_client

    k = config.kubeflow
    return kubeflow_client.Target(
        host=kubeflow_client.resolve_host(args.host, k.host),
        token=kubeflow_client.resolve_token(args.token),
        namespace=args.namespace or k.namespace, experiment=args.experiment or k.experiment,
        service_account=args.service_account or k.service_account)


def _load_remote(args):
    """(config, package path, whether the package is a temporary compile)."""
    import tempfile

    from pipeline import config as config_lib

    try:
        config = config_lib.absolutize(config_lib.load(args.config, {
            "paths.pipeline_root": args.pipeline_root}))
    except config_lib.ConfigError as err:
        raise UsageError(str(err)) from None
    if args.package:
        if not os.path.isfile(args.package):
            raise UsageError(f"--package {args.package}: no such file")
        return config, args.package, False
    # Compile in a process of its own (it loads import stand-ins, pipeline/import_stubs.py).
    import subprocess

    path = os.path.join(tempfile.mkdtemp(prefix="lockstep-"), "pipeline.yaml")
    command = [sys.executable, "-m", "pipeline.cli", "compile", "--output", path]
    command += ["--config", args.config] if args.config else []
    command += ["--image", args.image] if args.image else []
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise UsageError((result.stderr.strip().splitlines() or ["compile failed"])[-1]
                         .removeprefix("lockstep: error: "))
    return config, path, True


def _remote(command):
    """Runs a submit/schedule command: its KFP errors are one line and exit 1."""
    def wrapper(args) -> int:
        import shutil

        from pipeline import kubeflow_client

        package, temporary = None, False
        try:
            config, package, temporary = _load_remote(args)
            return command(args, config, package)
        except kubeflow_client.KfpError as err:
            return _fail(str(err), 1)
        finally:
            if temporary:
                shutil.rmtree(os.path.dirname(package), ignore_errors=True)
    return wrapper


def _params(args, package):
    from pipeline import kubeflow_client

    try:
        return kubeflow_client.parse_params(args.param, kubeflow_client.declared_parameters(package))
    except kubeflow_client.KfpError as err:
        raise UsageError(str(err)) from None


@_remote
def cmd_submit(args, config, package) -> int:
    from datetime import datetime, timezone

    from pipeline import kubeflow_client

    params = _params(args, package)
    run_name = args.run_name or (f"{config.pipeline_name}-"
                                 f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
    if args.vertex:
        if not (args.project and args.region):
            raise UsageError("--vertex needs --project and --region")
        name = kubeflow_client.submit_vertex(package, args.project, args.region, run_name, params,
                                             args.pipeline_root or config.paths.pipeline_root,
                                             args.service_account or config.kubeflow.service_account)
        print(f"lockstep: submitted {name} to Vertex AI Pipelines")
        return 0
    target = _target(args, config)
    run_id = kubeflow_client.submit(target, package, run_name, params, args.pipeline_root)
    print(f"lockstep: run {run_id} ({run_name}) in experiment '{target.experiment}'")
    print(kubeflow_client.run_url(target, run_id))
    return 0


def cmd_schedule(args) -> int:
    if args.local:
        return _schedule_local(args)
    if not args.cron:
        raise UsageError("--cron is required")
    return _schedule_kfp(args)


@_remote
def _schedule_kfp(args, config, package) -> int:
    from pipeline import kubeflow_client

    params = _params(args, package)
    target = _target(args, config)
    name = args.name or f"{config.pipeline_name}-retrain"
    job_id = kubeflow_client.schedule(target, package, name, args.cron, params,
                                      args.max_concurrency, args.catch_up, args.pipeline_root)
    print(f"lockstep: recurring run {job_id} ({name}): cron '{args.cron}' UTC, max concurrency "
          f"{args.max_concurrency}, {'catch-up' if args.catch_up else 'no catch-up'}")
    return 0


def _schedule_local(args) -> int:
    from pipeline import config as config_lib, local_schedule

    try:
        config = config_lib.absolutize(config_lib.load(args.config))
    except config_lib.ConfigError as err:
        return _fail(str(err), 2)
    name = args.name or config.pipeline_name
    try:
        if args.remove:
            found = local_schedule.remove(name)
            print(f"lockstep: {'removed' if found else 'no'} local schedule '{name}'")
            return 0
        if not args.cron:
            raise UsageError("--cron is required")
        root = config.paths.pipeline_root
        line = local_schedule.entry(
            name, args.cron, args.config, os.getcwd(), log=os.path.join(root, "schedule.log"),
            lock=os.path.join(root, "run.lock"))
        local_schedule.install(name, line)
    except local_schedule.ScheduleError as err:
        return _fail(str(err), 2)
    print(f"lockstep: installed local schedule '{name}' (machine local time):\n  {line}")
    return 0


def cmd_schedules(args) -> int:
    from pipeline import config as config_lib, kubeflow_client

    try:
        config = config_lib.load(args.config)
        target = _target(args, config)
        if args.action == "list":
            rows = kubeflow_client.list_schedules(target)
            for row in rows:
                print(f"{row.id}  {row.status:<8} {row.cron:<18} max {row.max_concurrency:<3} "
                      f"{row.name}")
            if not rows:
                print("lockstep: no recurring runs")
            return 0
        if not args.id:
            raise UsageError(f"schedules {args.action} needs the recurring run id")
        kubeflow_client.change_schedule(target, args.action, args.id)
    except config_lib.ConfigError as err:
        return _fail(str(err), 2)
    except kubeflow_client.KfpError as err:
        return _fail(str(err), 1)
    print(f"lockstep: {args.action} {args.id}: done")
    return 0


def _add_kfp_args(p: argparse.ArgumentParser, package: bool = True) -> None:
    _add_config_args(p)
    p.add_argument("--host", help="the KFP API endpoint, e.g. http://localhost:8080 "
                                  "(default: kubeflow.host or $KF_PIPELINES_ENDPOINT)")
    p.add_argument("--token", help="a bearer token (default: $KF_PIPELINES_TOKEN or $KFP_TOKEN)")
    p.add_argument("--namespace", help="the KFP namespace (default: kubeflow.namespace)")
    p.add_argument("--experiment", help="the experiment (default: kubeflow.experiment)")
    p.add_argument("--service-account", help="the Kubernetes service account runs use")
    if package:
        p.add_argument("--package", help="a spec from `lockstep compile` (default: compile now)")
        p.add_argument("--image", help="the image when compiling now")
        p.add_argument("--pipeline-root", help="the run's pipeline root (default: from config)")
        p.add_argument("--param", action="append", metavar="NAME=VALUE",
                       help="a pipeline parameter, e.g. train_steps=500 (repeatable)")


def _plan_sizes(args, config) -> list[tuple[str, int, bool]]:
    """(label, replicas, on_tpu) for each size asked for."""
    from pipeline import slices

    if args.replicas is not None:
        if args.replicas < 1:
            raise UsageError(f"--replicas must be at least 1, got {args.replicas}")
        return [(f"{args.replicas} replicas", args.replicas, False)]
    names = args.slice or ([config.trainer.tpu_slice] if config.trainer.tpu_slice else [])
    if names:
        try:
            found = [slices.get(name) for name in names]
        except slices.SliceError as err:
            raise UsageError(f"--slice: {err}") from None
        return [(s.name, s.replicas, True) for s in found]
    replicas = max(config.trainer.emulate_replicas, 1)
    return [(f"{replicas} replica(s)", replicas, False)]


def cmd_plan(args) -> int:
    import dataclasses
    import json

    from pipeline import config as config_lib, slices
    from trainer_module import scaling

    overrides = {"trainer.per_replica_batch": args.per_replica_batch,
                 "trainer.global_batch": args.global_batch,
                 "trainer.train_examples": args.train_examples,
                 "trainer.train_steps": args.train_steps}
    try:
        config = config_lib.load(args.config, overrides)
        if args.per_replica_batch:  # a per-replica batch on the command line wins over the file's global
            config.trainer.global_batch = 0
        sizes = _plan_sizes(args, config)
        plans = [(label, scaling.make_plan(config.trainer, replicas, on_tpu))
                 for label, replicas, on_tpu in sizes]
    except (config_lib.ConfigError, scaling.ScalingError) as err:
        return _fail(str(err), 2)
    if args.json:
        print(json.dumps([{"size": label, **dataclasses.asdict(plan)} for label, plan in plans],
                         indent=2))
        return 0
    for i, (label, plan) in enumerate(plans):
        if i:
            print()
        if label in slices.PRESETS:
            print("TPU slice " + slices.PRESETS[label].describe())
        print(plan.describe())
    if len(plans) > 1:
        first = plans[0][1]
        print("\nFrom " + plans[0][0] + ":")
        for label, plan in plans[1:]:
            print(f"  {label}: global batch x{plan.global_batch / first.global_batch:g}, "
                  f"train steps x{plan.train_steps / first.train_steps:g}, "
                  f"learning rate x{plan.learning_rate / first.learning_rate:g}, "
                  f"examples x{plan.examples / first.examples:g}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lockstep", description="A TFX pipeline with a synchronous data-parallel trainer.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the whole pipeline locally (LocalDagRunner)")
    _add_config_args(run)
    run.add_argument("--data", help="a CSV file or a directory of CSV files (default: bundled penguins)")
    run.add_argument("--label", help="the label column (default: species)")
    run.add_argument("--pipeline-root", help="where artifacts and ML Metadata go")
    run.add_argument("--serving-dir", help="where blessed models are pushed, one version dir each")
    run.add_argument("--no-cache", action="store_true", help="execute every component again")
    run.add_argument("--emulate-replicas", type=int, help="train on N emulated CPU replicas")
    run.add_argument("--train-steps", type=int, help="fixed train steps (default: from the example budget)")
    run.add_argument("-v", "--verbose", action="store_true", help="log TFX and trainer progress")
    run.add_argument("--lock", help="a lock file: if another run holds it, skip this run (exit 0)")
    run.add_argument("--orchestrator", choices=["local", "kfp-local"], default="local",
                     help="local: TFX's LocalDagRunner (default); kfp-local: compile for Kubeflow "
                          "and run the spec under KFP's local orchestrator, each task a process")
    run.set_defaults(func=cmd_run)

    comp = sub.add_parser(
        "compile", help="write the Kubeflow Pipelines v2 spec (YAML) with KubeflowV2DagRunner",
        description="Compile for Kubeflow Pipelines v2. Needs no network or credentials and "
                    "writes nothing but the output file. Data root, pipeline root and serving "
                    "dir are URIs (gs://, s3://, or paths the pods can see); train_steps, "
                    "train_examples, per_replica_batch, base_learning_rate and data_root are "
                    "pipeline parameters a run can override.")
    _add_config_args(comp)
    comp.add_argument("--image", help="the component image (default: kubeflow.image, tagged with "
                                      "kubeflow.image_tag or the package version)")
    comp.add_argument("--output", default="pipeline.yaml", help="where to write the spec")
    comp.add_argument("--data", help="the data root (overrides data.path)")
    comp.add_argument("--pipeline-root", help="overrides paths.pipeline_root")
    comp.add_argument("--serving-dir", help="overrides paths.serving_dir")
    comp.add_argument("--slice", help="a single-host TPU slice for the Trainer, e.g. v5e-4")
    comp.set_defaults(func=cmd_compile)

    submit = sub.add_parser("submit", help="create a run on Kubeflow Pipelines (or Vertex AI)")
    _add_kfp_args(submit)
    submit.add_argument("--run-name", help="the run's name (default: <pipeline>-<UTC time>)")
    submit.add_argument("--vertex", action="store_true", help="submit to Vertex AI Pipelines")
    submit.add_argument("--project", help="with --vertex: the Google Cloud project")
    submit.add_argument("--region", help="with --vertex: the region, e.g. us-central1")
    submit.set_defaults(func=cmd_submit)

    sched = sub.add_parser(
        "schedule", help="create a recurring run on KFP, or a local crontab entry",
        description="On KFP: a recurring run. The cron has 6 fields, seconds first, and is read "
                    "in UTC: '0 0 3 * * *' is 03:00 UTC daily. Defaults: max concurrency 1, no "
                    "catch-up of missed runs. With --local: a crontab entry (5 fields, machine "
                    "local time) that runs `lockstep run` under a lock, so runs never overlap.")
    _add_kfp_args(sched)
    sched.add_argument("--cron", help="KFP: 6 fields in UTC, e.g. '0 0 3 * * *'; --local: 5 fields")
    sched.add_argument("--name", help="the schedule's name (default: <pipeline>-retrain)")
    sched.add_argument("--max-concurrency", type=int, default=1,
                       help="runs of this schedule at once (default 1)")
    sched.add_argument("--catch-up", action="store_true",
                       help="run the missed intervals after a pause (default: no catch-up)")
    sched.add_argument("--local", action="store_true", help="install a local crontab entry")
    sched.add_argument("--remove", action="store_true", help="with --local: remove the entry")
    sched.set_defaults(func=cmd_schedule)

    scheds = sub.add_parser("schedules", help="list, pause, resume or delete recurring runs on KFP")
    scheds.add_argument("action", choices=["list", "pause", "resume", "delete"])
    scheds.add_argument("id", nargs="?", help="the recurring run id (not for list)")
    _add_kfp_args(scheds, package=False)
    scheds.set_defaults(func=cmd_schedules)

    plan = sub.add_parser(
        "plan", help="print the training plan for a slice or replica count, without training",
        description="The scaling rules as numbers: the per-replica batch stays fixed, the global "
                    "batch grows with the replicas, train steps shrink so the examples stay the "
                    "same, the learning rate scales with the global batch. Repeat --slice to "
                    "compare sizes (start small, then grow).")
    _add_config_args(plan)
    size = plan.add_mutually_exclusive_group()
    size.add_argument("--slice", action="append",
                      help="a TPU slice preset, e.g. v5e-4, v5e-16, v4-32 (repeatable)")
    size.add_argument("--replicas", type=int, help="a replica count (GPUs, CPU replicas, ...)")
    plan.add_argument("--per-replica-batch", type=int, help="override trainer.per_replica_batch")
    plan.add_argument("--global-batch", type=int, help="override trainer.global_batch")
    plan.add_argument("--train-examples", type=int, help="override trainer.train_examples")
    plan.add_argument("--train-steps", type=int, help="override trainer.train_steps")
    plan.add_argument("--json", action="store_true", help="print the plan(s) as JSON")
    plan.set_defaults(func=cmd_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    if not sys.warnoptions:  # libraries' version nags are not the user's business here
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except UsageError as err:
        return _fail(str(err), 2)


if __name__ == "__main__":
    sys.exit(main())
