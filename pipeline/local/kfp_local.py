"""Runs a compiled Kubeflow spec on this machine, the way Kubeflow Pipelines would run it.

KFP's local orchestrator (`kfp.local`) walks the spec's DAG, builds each task's executor input
and resolves its placeholders the way KFP's launcher does on a cluster; each task then runs its
own container command (components/entrypoint.py, TFX's executor entrypoint) as a process of its
own, in this environment (SubprocessRunner) or in the pipeline image (DockerRunner).

kfp.local has two gaps for TFX's container components. They are bridged here, and only while
`bridged()` is active (no copy of kfp.local's code; its names are rebound by the wall,
components/compat/kfp.py):

1. SubprocessRunner refuses container components: its task handler insists on KFP's
   lightweight-component executor in the command. `_TaskProcess` runs the task's container
   command as it is, with this environment's Python for `python`. (DockerRunner takes them, but
   appends the command to the image's ENTRYPOINT where Kubernetes replaces it; `_TaskContainer`
   runs it as a pod would.)
2. kfp.local hands an upstream task's artifacts to downstream tasks as `system.Artifact`: TFX
   types its artifacts with an `instanceSchema` (title `tfx.Examples`, ...), which kfp.local's
   artifact classes do not know, and TFX's entrypoint then fails with "Could not import
   system.Artifact". KFP's backend keeps the type's title; `_keep_artifact_type` does too.
3. (Cosmetic, but it names every task directory.) kfp.local cuts five letters off each
   component's name, expecting KFP's `comp-` prefix, which TFX's names lack (`CsvExampleGen`
   became `ampleGen`); `_task_name` keeps a name without that prefix whole.

Every task's output goes to `<task dir>/task.log` (the console gets one line per task), and its
time is split into start-up (process start to its executor's Do) and work.

What such a run proves: the compiled spec loads in KFP's SDK, its DAG, parameters, placeholders
and artifact passing work, every executor runs from its executor input alone, and the pushed
model serves. What it does not: the image (see `make image`), the cluster's scheduling (node
selectors, TPU or GPU requests, retries), KFP's cache, and object-store paths.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Iterator

from components.entrypoint import START_MARKER
from components.fs import is_uri as fs_is_uri
from pipeline.reporting import run_report
from runtime import exit_status

TASK_LOG = "task.log"
TASK_COMMAND = "command.json"  # the task's resolved command: run it again by hand with this
EXECUTOR_OUTPUT = "executor_output.json"


class KfpLocalError(RuntimeError):
    """The spec could not be compiled or run; the message is one line."""

    lockstep_exit_status = exit_status.FAILED


class TaskFailed(KfpLocalError):
    """A task exited non-zero; the message names it and its log."""


@dataclasses.dataclass
class TaskRecord:
    task: str
    task_dir: str
    succeeded: bool
    start_seconds: float  # process start to the executor's Do (all of it if Do never began)
    work_seconds: float  # the executor's Do to process exit
    started_at: float = 0.0  # Unix time the process started
    exit_status: int = 0

    @property
    def seconds(self) -> float:
        return self.start_seconds + self.work_seconds

    @property
    def log(self) -> str:
        return os.path.join(self.task_dir, TASK_LOG)


def _executor_input(command: list[str]) -> dict:
    """The executor input kfp.local put into the command (TFX passes it as one argument)."""
    for i, arg in enumerate(command[:-1]):
        if arg == "--json_serialized_invocation_args":
            return json.loads(command[i + 1])
    raise ValueError("the task's command carries no --json_serialized_invocation_args")


def _do_began(log_path: str) -> float | None:
    with open(log_path, errors="replace") as handle:
        for line in handle:
            if line.startswith(START_MARKER):
                return float(line[len(START_MARKER):].strip())
    return None


class _TaskProcess:
    """Gap 1: a TFX container component's own command, run as a local process.

    Stands in for kfp.local's SubprocessTaskHandler (same constructor and `run`); `records` and
    `on_task` are set by `bridged()`."""

    records: list[TaskRecord] = []
    on_task = staticmethod(lambda record: None)

    def __init__(self, image, full_command, pipeline_root, runner):
        self.image, self.full_command, self.pipeline_root = image, list(full_command), pipeline_root

    def _execute(self, log) -> int:
        command = [sys.executable if part in ("python", "python3") else part
                   for part in self.full_command[:1]] + self.full_command[1:]
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode

    def run(self):
        from kfp.local import status

        task_dir = os.path.dirname(_executor_input(self.full_command)["outputs"]["outputFile"])
        self._make_task_dir(task_dir)
        log_path = os.path.join(task_dir, TASK_LOG)
        with open(os.path.join(task_dir, TASK_COMMAND), "w") as handle:
            json.dump(self.full_command, handle)
        started = time.time()
        with open(log_path, "w") as log:
            code = self._execute(log)
        ended = time.time()
        began = _do_began(log_path) or ended
        record = TaskRecord(os.path.basename(task_dir), task_dir, code == 0,
                            max(began - started, 0.0), max(ended - began, 0.0), started, code)
        type(self).records.append(record)
        type(self).on_task(record)
        return status.Status.SUCCESS if code == 0 else status.Status.FAILURE

    def _make_task_dir(self, task_dir: str) -> None:
        os.makedirs(task_dir, exist_ok=True)


class _TaskContainer(_TaskProcess):
    """The same in the task's image (DockerRunner; podman's Docker API works too), as a pod runs
    it: the spec's command replaces the image's ENTRYPOINT, as Kubernetes does (kfp.local's own
    Docker handler appends it to the ENTRYPOINT instead). The pipeline root is mounted at the
    same path, and the task's directory is writable by the image's (non-root) user."""

    def _make_task_dir(self, task_dir: str) -> None:
        os.makedirs(task_dir, exist_ok=True)
        for path in (task_dir, os.path.dirname(task_dir)):
            os.chmod(path, 0o777)

    def _execute(self, log) -> int:
        import docker

        client = docker.from_env()
        try:
            container = client.containers.run(
                self.image, entrypoint=self.full_command, command=[], detach=True,
                volumes={self.pipeline_root: {"bind": self.pipeline_root, "mode": "rw"}})
            try:
                for chunk in container.logs(stream=True, follow=True):
                    log.write(chunk.decode(errors="replace"))
                return container.wait()["StatusCode"]
            finally:
                container.remove(force=True)
        finally:
            client.close()


def _keep_artifact_type(convert):
    """Gap 2: the dsl.Artifact kfp.local makes of an output keeps the TFX type's title."""

    def converted(runtime_artifact):
        import yaml

        artifact = convert(runtime_artifact)
        schema = runtime_artifact.type.instance_schema
        if schema:
            artifact.schema_title = yaml.safe_load(schema)["title"]
        return artifact

    return converted


def _task_name(cut):
    """Gap 3: a task directory named for the whole component name when it has no `comp-`."""

    def named(component_name: str) -> str:
        return cut(component_name) if component_name.startswith("comp-") else component_name

    return named


@contextlib.contextmanager
def bridged(on_task=lambda record: None) -> Iterator[list[TaskRecord]]:
    """kfp.local with its gaps bridged, for the duration (its names rebound by
    components/compat/kfp.py); yields the tasks' records as they end."""
    from components.compat import kfp as kfp_compat

    records: list[TaskRecord] = []
    attributes = {"records": records, "on_task": staticmethod(on_task)}
    process = type("TaskProcess", (_TaskProcess,), attributes)
    container = type("TaskContainer", (_TaskContainer,), attributes)
    with kfp_compat.local_bridged(process, container, _keep_artifact_type, _task_name):
        yield records


@dataclasses.dataclass
class LocalRun:
    pipeline_dir: str  # <pipeline root>/<pipeline>-<timestamp>: every task's directory is in it
    tasks: list[TaskRecord]
    log: str  # kfp.local's own log

    def report(self) -> run_report.RunReport:
        """The same summary as a LocalDagRunner run's, from the tasks' executor outputs."""
        nodes = [run_report.NodeReport(t.task, "executed" if t.succeeded else "failed",
                                       t.seconds, t.start_seconds) for t in self.tasks]
        report = run_report.build(nodes, {t.task: task_outputs(t.task_dir) for t in self.tasks})
        report.run_id = os.path.basename(self.pipeline_dir)  # kfp.local's <pipeline>-<time>
        return report


def run(spec_path: str, pipeline_root: str, arguments: dict | None = None,
        on_task=lambda record: None, containers: bool = False) -> LocalRun:
    """Runs the compiled spec under kfp.local's DAG orchestrator, each task a local process, or
    with containers=True a container of the spec's image (only the pipeline root is mounted:
    data and serving dir must be under it).

    Raises TaskFailed naming the first task that failed."""
    from kfp import components, local

    os.makedirs(pipeline_root, exist_ok=True)
    log_path = os.path.join(pipeline_root, "kfp-local.log")
    pipeline = components.load_component_from_file(spec_path)
    runner = local.DockerRunner() if containers else local.SubprocessRunner(use_venv=False)
    local.init(runner=runner, pipeline_root=pipeline_root, raise_on_error=False)
    console, plain_print = sys.stdout, builtins.print

    def report_task(record):  # on the console, and without kfp.local's indented print
        indented, builtins.print = builtins.print, plain_print
        try:
            with contextlib.redirect_stdout(console):
                on_task(record)
        finally:
            builtins.print = indented

    # kfp.local logs every task's inputs and outputs: into the log, not onto the console.
    with bridged(report_task) as records, open(log_path, "a") as log, \
            contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        pipeline(**(arguments or {}))
    failed = [r for r in records if not r.succeeded]
    if failed:
        raise TaskFailed(f"task {failed[0].task} failed (exit status {failed[0].exit_status}); "
                         f"its log: {failed[0].log}")
    if not records:
        raise TaskFailed(f"no task ran; kfp.local's log: {log_path}")
    return LocalRun(os.path.dirname(records[0].task_dir), records, log_path)


def past_runs(pipeline_root: str) -> list[run_report.RunReport]:
    """The kfp-local runs kept under a pipeline root, newest first (`lockstep runs`, `lockstep
    report`: such a run keeps no ML Metadata). A run is a `<pipeline>-<time>/` directory whose
    task directories hold the task's command (TASK_COMMAND); each task is read back from its
    files: its start (the command's time), its executor's start (the log's START_MARKER), its end
    (the log's last write), done when its executor wrote its output."""
    if fs_is_uri(pipeline_root) or not os.path.isdir(pipeline_root):
        return []
    reports = []
    for name in sorted(os.listdir(pipeline_root)):
        run_dir = os.path.join(pipeline_root, name)
        tasks = [os.path.join(run_dir, t) for t in sorted(os.listdir(run_dir))
                 if os.path.isfile(os.path.join(run_dir, t, TASK_COMMAND))] \
            if os.path.isdir(run_dir) else []
        if not tasks:
            continue
        records = sorted((_record_kept(t) for t in tasks), key=lambda r: r.started_at)
        report = LocalRun(run_dir, records, "").report()
        report.started = records[0].started_at
        report.data = _input_base(records[0].task_dir) or ""
        reports.append(report)
    return sorted(reports, key=lambda r: r.started, reverse=True)


def _record_kept(task_dir: str) -> TaskRecord:
    started = os.path.getmtime(os.path.join(task_dir, TASK_COMMAND))
    log = os.path.join(task_dir, TASK_LOG)
    ended = os.path.getmtime(log) if os.path.exists(log) else started
    began = (_do_began(log) if os.path.exists(log) else None) or ended
    done = os.path.exists(os.path.join(task_dir, EXECUTOR_OUTPUT))
    return TaskRecord(os.path.basename(task_dir), task_dir, done, max(began - started, 0.0),
                      max(ended - began, 0.0), started, 0 if done else 1)


def _input_base(task_dir: str) -> str | None:
    """Where the ExampleGen task read (its input_base parameter), if this task has one."""
    try:
        with open(os.path.join(task_dir, TASK_COMMAND)) as handle:
            values = _executor_input(json.load(handle))["inputs"].get("parameterValues", {})
    except (OSError, ValueError, KeyError):
        return None
    return values.get("input_base")


def task_outputs(task_dir: str) -> list[run_report.Output]:
    """The output artifacts a task's executor wrote, with the properties TFX gave them."""
    path = os.path.join(task_dir, EXECUTOR_OUTPUT)
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        output = json.load(handle)
    return [run_report.Output(key, artifact.get("uri", ""), artifact.get("metadata", {}))
            for key, artifact_list in output.get("artifacts", {}).items()
            for artifact in artifact_list.get("artifacts", [])]


def run_config(config, on_task=lambda record: None) -> LocalRun:
    """Compiles the pipeline for this config (config: absolutized) and runs the spec here;
    compile takes the same decisions from the same data (pipeline/preflight.py).

    The spec and the config it was compiled from go to <pipeline root>/kfp-local/."""
    from pipeline.kubeflow import compiler

    spec = os.path.join(config.paths.pipeline_root, "kfp-local", "pipeline.yaml")
    try:
        compiler.compile_in_fresh_process(config, spec)
    except compiler.CompileError as err:
        raise KfpLocalError(f"compile failed: {err}") from None
    return run(spec, config.paths.pipeline_root, on_task=on_task)

