"""The Trainer on a multi-host TPU slice or on several GPU machines: a Vertex AI custom job the
Trainer task submits and waits for.

A Kubeflow task is one pod on one host, and a TPU slice of v5e-16 and up spans 4 to 64 hosts.
Vertex AI custom training provisions such a slice as one job (a worker pool of one replica whose
machine type and `tpu_topology` name the slice; Vertex starts the hosts the topology implies). So
on a multi-host `trainer.tpu_slice` the pipeline's Trainer task (components/trainer.py's
component with this executor) runs on a CPU pod of the cluster and:

1. builds the job with the Vertex SDK's own types (google.cloud.aiplatform_v1, which refuse an
   unknown or mistyped field): the pipeline's own image, its entrypoint (components/entrypoint.py)
   running the plain Trainer executor with this task's very inputs, outputs and properties, so
   the same run_fn and TrainSpec write the model to the same URIs;
2. submits it, or, on a KFP retry of the task, finds the job it submitted before (its name is
   kept in the ModelRun URI) and waits for that one instead of starting another;
3. waits, and hands on the model the job wrote, as the Trainer does. A job that fails because
   its TPU VMs were preempted is submitted again (vertex.resubmits times): the Trainer resumes
   from the checkpoints in the ModelRun URI (trainer_module/resume.py). Vertex itself restarts
   the job when a host restarts (`restart_job_on_worker_restart`).

**Fallback slices** (`trainer.fallback_slices = ["v5e-8"]`): when Vertex answers that it has no
capacity or no quota for the slice (the create refused with RESOURCE_EXHAUSTED, or the job failed
for want of resources), the task submits the job on the next slice of the list, with the
accumulation that keeps the first slice's global batch (16 replicas -> 8 with accumulation 2), and
says so; the Trainer's plan then has the global batch, learning rate and steps it would have had
on the first slice, and a job resumed from a checkpoint the first slice wrote goes on with them
(elastic resume, trainer_module/resume.py).

**Several GPU machines** (`trainer.gpu_machines = 4`, components/gpu_machines.py): the job has
two worker pools of the machine type and its GPUs, a chief (workerpool0, one replica) and the
workers (workerpool1, N - 1 replicas); Vertex sets each replica's TF_CONFIG (chief and workers)
and CLUSTER_SPEC, so each runs the Trainer under MultiWorkerMirroredStrategy (MirroredStrategy
over its machine's GPUs inside it), its input pipeline reading its own share of the files. Only
the chief writes the model and the checkpoints (trainer_module/train.py); the workers run
`WorkerExecutor`, the Trainer executor without TFX's check that the model is there, which is the
chief's. A preempted job resumes from the chief's checkpoints, as a slice's does; with
`trainer.fallback_gpu_machines = [2]`, no capacity for 4 machines submits 2 with accumulation 2.

Which slices Vertex custom training can launch is written once (components/vertex_job.py,
`launch_refusal`); a slice
it cannot launch is refused when the pipeline is compiled, as are GPU machines whose accelerator
Vertex does not know. The project, region, service account
and network come from the config's [vertex] table and are run parameters of the pipeline; an API
error (quota, a region without the slice, a topology the machine type lacks) is one line naming
the setting.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from components import fs, trainer, vertex_client, vertex_fallback
from components.vertex_job import (API_ENDPOINT, IMAGE, JOB_RECORD, POLL_SECONDS, RESUBMITS,
                                   RUN_PARAMETERS, TPU_SLICE, VertexError, VertexSettings,
                                   container_args, custom_job, task_spec)

_log = logging.getLogger(__name__)

class Executor(trainer.Executor):
    """Runs the Trainer as a Vertex AI custom job on the slice or machines, and waits for it."""

    def Do(self, input_dict, output_dict, exec_properties):
        spec = task_spec(exec_properties)  # decoded once, handed on
        settings = VertexSettings.from_exec_properties(exec_properties, spec)
        model_run = artifact_utils.get_single_uri(
            output_dict[standard_component_specs.MODEL_RUN_KEY])
        record = fs.join(model_run, JOB_RECORD)
        service = vertex_client.client(settings)
        left = vertex_fallback.fallbacks(spec.trainer if spec else None)
        job, on = self._earlier_job(service, record, settings)
        first, properties = settings, exec_properties
        if on is not None and on != _shape_key(settings) and on in left:  # a retry after one
            settings, properties, _ = vertex_fallback.on_fallback(first, exec_properties, spec, on)
            left = left[left.index(on) + 1:]
        attempts = 0
        while job is None or job.state.name != "JOB_STATE_SUCCEEDED":
            if job is not None and vertex_client.no_capacity(job) and left:
                why, job = f"job {job.name} ended {job.state.name}: {job.error.message}", None
                settings, properties = self._fall_back(first, exec_properties, spec, left, why)
            if job is not None:  # it ended without success
                if not vertex_client.preempted(job) or attempts >= settings.resubmits:
                    raise VertexError(f"Vertex AI job {job.name} ended {job.state.name}: "
                                      f"{job.error.message or 'no error message'}")
                attempts += 1
                _log.warning("Vertex AI job %s was preempted (%s): submitting it again (%d of "
                             "%d); the Trainer resumes from its checkpoints", job.name,
                             job.error.message, attempts, settings.resubmits)
            try:
                job = self._submit(service, settings, record,
                                   container_args(input_dict, output_dict, properties))
            except VertexError as refused:
                if not (refused.capacity and left):
                    raise
                settings, properties = self._fall_back(first, exec_properties, spec, left,
                                                       str(refused))
                job = None  # nothing runs: submit on the fallback
                continue
            job = self._wait(service, job.name, settings)
        _log.info("Vertex AI job %s succeeded", job.name)

    @staticmethod
    def _fall_back(first: VertexSettings, exec_properties, spec, left: list, why: str):
        """The next fallback's settings and properties (taken off `left`), said."""
        settings, properties, words = vertex_fallback.on_fallback(first, exec_properties, spec,
                                                                  left.pop(0))
        _log.warning("No capacity for %s (%s): %s", first.shape, why, words)
        return settings, properties

    @staticmethod
    def _earlier_job(service, record: str, settings: VertexSettings):
        """The job a previous try of this task submitted, waited for to its end, and the shape
        it ran on (a slice name or a machine count); (None, None) without one."""
        if not fs.exists(record):
            return None, None
        recorded = json.loads(fs.read_text(record))
        name = recorded["name"]
        _log.info("Found Vertex AI job %s from an earlier try of this task: waiting for it", name)
        return Executor._wait(service, name, settings), recorded.get(
            "gpu_machines" if settings.gpus else "tpu_slice")

    @staticmethod
    def _submit(service, settings: VertexSettings, record: str, args: list[str]):
        shape = settings.shape.replace(" x ", "x")
        display_name = f"lockstep-trainer-{shape}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            job = service.create_custom_job(parent=settings.parent,
                                            custom_job=custom_job(settings, display_name, args))
        except Exception as err:  # noqa: BLE001 - any API error, as one line naming the setting  google.api_core's errors, by status
            raise vertex_client.refused(err, settings) from None
        fs.makedirs(record.rsplit("/", 1)[0])
        fs.write_text(record, json.dumps({"name": job.name, **(
            {"gpu_machines": settings.gpus.machines} if settings.gpus
            else {"tpu_slice": settings.tpu_slice})}))
        _log.info("Submitted Vertex AI job %s on %s (%s)", job.name, settings.shape,
                  settings.where())
        return job

    @staticmethod
    def _wait(service, name: str, settings: VertexSettings):
        while True:
            try:
                job = service.get_custom_job(name=name)
            except Exception as err:  # noqa: BLE001 - any API error, as one line naming the setting
                raise vertex_client.refused(err, settings) from None
            if job.state.name in vertex_client.TERMINAL:
                return job
            time.sleep(settings.poll_seconds)


def _shape_key(settings: VertexSettings):
    """The shape as the job record keeps it: the machine count, or the slice's name."""
    return settings.gpus.machines if settings.gpus else settings.tpu_slice


class WorkerExecutor(trainer.Executor):
    """A GPU job's worker replica: the Trainer executor, which trains this machine's share with
    the chief and writes no model (trainer_module/train.py). TFX's executor then checks that
    run_fn wrote the model, which is the chief's to write and may not be there yet: that check
    is the chief's replica's."""

    def Do(self, input_dict, output_dict, exec_properties):
        try:
            super().Do(input_dict, output_dict, exec_properties)
        except RuntimeError as err:
            if str(err) != NO_MODEL:
                raise


NO_MODEL = "run_fn failed to generate model."  # TFX's Trainer executor's, when it finds none


class VertexTrainerSpec(trainer.TrainerSpec):
    PARAMETERS = {
        **trainer.TrainerSpec.PARAMETERS,
        **{name: ExecutionParameter(type=str, optional=True) for name in RUN_PARAMETERS},
        IMAGE: ExecutionParameter(type=str), TPU_SLICE: ExecutionParameter(type=str),
        API_ENDPOINT: ExecutionParameter(type=str, optional=True),
        POLL_SECONDS: ExecutionParameter(type=float, optional=True),
        RESUBMITS: ExecutionParameter(type=int, optional=True),
    }


class VertexTrainer(trainer.Trainer):
    """The Trainer whose training runs as a Vertex AI job on a multi-host TPU slice or several
    GPU machines; `vertex`:
    its execution properties (the keys above), values or RuntimeParameters."""

    SPEC_CLASS = VertexTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, *, vertex: dict[str, Any], **kwargs):
        unknown = set(vertex) - set(VertexTrainerSpec.PARAMETERS)
        if unknown:
            raise ValueError(f"unknown Vertex setting(s): {', '.join(sorted(unknown))}")
        super().__init__(**kwargs, extra_parameters=vertex)
