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

Which slices Vertex custom training can launch is written once here (`launch_refusal`); a slice
it cannot launch is refused when the pipeline is compiled, as are GPU machines whose accelerator
Vertex does not know. The project, region, service account
and network come from the config's [vertex] table and are run parameters of the pipeline; an API
error (quota, a region without the slice, a topology the machine type lacks) is one line naming
the setting.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import re
import time
from typing import Any

from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from components import entrypoint, fs, trainer
from components.gpu_machines import GpuMachines, GpuMachinesError
from trainer_module import slices
from trainer_module.settings import RUN_PARAMETERS as TRAINER_PARAMETERS
from trainer_module.settings import TrainerConfig
from trainer_module.custom_config import TRAINER_KEY, TrainSpec

_log = logging.getLogger(__name__)

# The task's execution properties that configure the job, not the Trainer (compiled as run
# parameters where a run may change them).
PROJECT, REGION = "vertex_project", "vertex_region"
SERVICE_ACCOUNT, NETWORK = "vertex_service_account", "vertex_network"
RUN_PARAMETERS = (PROJECT, REGION, SERVICE_ACCOUNT, NETWORK)
IMAGE, TPU_SLICE, API_ENDPOINT = "vertex_image", "vertex_tpu_slice", "vertex_api_endpoint"
POLL_SECONDS, RESUBMITS = "vertex_poll_seconds", "vertex_resubmits"
JOB_RECORD = "vertex_job.json"  # in the ModelRun URI: the job this task submitted
TRAINER_EXECUTOR = "components.trainer.Executor"
WORKER_EXECUTOR = "components.vertex_training.WorkerExecutor"  # a GPU job's workers
CHIEF_POOL, WORKER_POOL = "workerpool0", "workerpool1"  # Vertex's names (its CLUSTER_SPEC)
# Vertex custom training's TPU VM machine types, by slice family: v5e slices of 16 chips and up are
# 4-chip hosts (ct5lp-hightpu-4t) in the slice's topology (Vertex's "configure compute" page).
_MACHINES = {"v5e": "ct5lp-hightpu-4t"}
_REFUSED = {
    "v6e": "Vertex can launch v6e slices, but TensorFlow 2.16 does not run on v6e (Cloud TPU "
           "supports TensorFlow on v6e only in tf-nightly 2.18+)",
    "v4": "Vertex custom training offers no v4 slices (a multi-host v4 slice needs a GKE "
          "JobSet, which lockstep does not build)",
    "v5p": "Vertex custom training offers no v5p slices (a multi-host v5p slice needs a GKE "
           "JobSet, which lockstep does not build)",
}
_TERMINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
             "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED")


class VertexError(RuntimeError):
    """The job could not be submitted or did not succeed; one line naming the setting or job.
    `capacity`: Vertex has no capacity or quota for the slice (a fallback slice may have)."""

    def __init__(self, message: str, capacity: bool = False):
        super().__init__(message)
        self.capacity = capacity


def submits_job(trainer_cfg: TrainerConfig) -> bool:
    """Whether the Trainer of these settings runs as a Vertex AI job: several GPU machines, or
    a TPU slice of several hosts."""
    return bool(trainer_cfg.gpu_machines) or bool(
        trainer_cfg.tpu_slice and not slices.get(trainer_cfg.tpu_slice).single_host)


def launch_refusal(tpu: slices.TpuSlice) -> str:
    """Why Vertex custom training cannot run this multi-host slice ("" when it can)."""
    family = tpu.name.split("-")[0]
    return _REFUSED.get(family, "" if family in _MACHINES else
                        f"no Vertex custom training machine type is known for {tpu.name}")


@dataclasses.dataclass(frozen=True)
class VertexSettings:
    """Where and as whom the job runs, on what, and how it is watched; read from the task's
    properties. `gpus`: several GPU machines (then tpu_slice is ""), else the TPU slice."""

    project: str
    region: str
    tpu_slice: str
    image: str
    service_account: str = ""
    network: str = ""
    api_endpoint: str = ""  # default: https://<region>-aiplatform.googleapis.com
    poll_seconds: float = 30.0
    resubmits: int = 3
    gpus: GpuMachines | None = None

    @classmethod
    def from_exec_properties(cls, properties: dict[str, Any]) -> "VertexSettings":
        trainer_cfg = task_trainer(properties)
        gpus = gpu_machines(trainer_cfg) if trainer_cfg and trainer_cfg.gpu_machines else None
        what = f"{gpus.name} GPU machines" if gpus else "a multi-host TPU slice"
        for key, config_key in ((PROJECT, "vertex.project"), (REGION, "vertex.region")):
            if not properties.get(key):
                raise VertexError(f"{config_key} is not set: the Trainer of {what} runs as a "
                                  f"Vertex AI job (set [vertex] {config_key.split('.')[1]} in the "
                                  f"config, or run with --param {key}=...)")
        name = ""
        if gpus is None:
            tpu = slices.get(properties[TPU_SLICE])
            refusal = launch_refusal(tpu)
            if refusal:
                raise VertexError(f"trainer.tpu_slice={tpu.name}: {refusal}")
            name = tpu.name
        return cls(properties[PROJECT], properties[REGION], name, properties[IMAGE],
                   properties.get(SERVICE_ACCOUNT) or "", properties.get(NETWORK) or "",
                   properties.get(API_ENDPOINT) or "",
                   float(properties.get(POLL_SECONDS) or 30.0),
                   int(properties.get(RESUBMITS) or 0), gpus)

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def shape(self) -> str:
        """What the job runs on: "v5e-16", or "4 x a2-highgpu-8g"."""
        return self.gpus.name if self.gpus else self.tpu_slice

    def where(self) -> str:
        return f"vertex.project={self.project}, vertex.region={self.region}"


def task_trainer(properties: dict[str, Any]) -> TrainerConfig | None:
    """The Trainer's settings in the task's custom_config, with the run's parameters (None
    without them)."""
    custom = json.loads(properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "{}")
    if not custom.get(TRAINER_KEY):
        return None
    return TrainSpec.from_custom_config(custom, run_parameters=properties).trainer


def gpu_machines(trainer_cfg: TrainerConfig, machines: int | None = None) -> GpuMachines:
    """The GPU machines of these settings (GpuMachines.of), a refusal as a VertexError."""
    try:
        return GpuMachines.of(trainer_cfg, machines)
    except GpuMachinesError as err:
        raise VertexError(str(err)) from None


def container_args(input_dict, output_dict, exec_properties: dict[str, Any],
                   executor: str = TRAINER_EXECUTOR) -> list[str]:
    """The job's arguments to the image's entrypoint: the Trainer executor (`executor`: a GPU
    job's workers run WORKER_EXECUTOR), on this task's own inputs, outputs and properties (the
    job's settings left out)."""
    properties = {k: v for k, v in exec_properties.items() if not k.startswith("vertex_")}

    def encoded(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return ["--executor_class_path", executor,
            "--inputs-base64", encoded(artifact_utils.jsonify_artifact_dict(input_dict)),
            "--outputs-base64", encoded(artifact_utils.jsonify_artifact_dict(output_dict)),
            "--exec-properties-base64", encoded(json.dumps(properties))]


def custom_job(settings: VertexSettings, display_name: str, args: list[str]):
    """The CustomJob, built and checked by the SDK's types: on a TPU slice, one worker pool of
    one replica on the slice's machine type and topology; on GPU machines, the chief's pool (one
    replica) and the workers' (machines - 1), each machine with its GPUs. Every replica runs the
    pipeline image's entrypoint with `args` (the workers' with their executor)."""
    from google.cloud.aiplatform_v1.types import custom_job as job_types, env_var
    from google.cloud.aiplatform_v1.types import machine_resources

    def pool(machine, replicas: int, pool_args: list[str]):
        return job_types.WorkerPoolSpec(
            machine_spec=machine, replica_count=replicas,
            container_spec=job_types.ContainerSpec(
                image_uri=settings.image, command=list(entrypoint.COMMAND), args=pool_args,
                env=[env_var.EnvVar(name="TF_USE_LEGACY_KERAS", value="1")]))

    gpus = settings.gpus
    if gpus:
        machine = machine_resources.MachineSpec(
            machine_type=gpus.machine_type, accelerator_type=gpus.accelerator,
            accelerator_count=gpus.per_machine)
        worker_args = [WORKER_EXECUTOR if arg == TRAINER_EXECUTOR else arg for arg in args]
        pools = [pool(machine, 1, args)] + (
            [pool(machine, gpus.machines - 1, worker_args)] if gpus.machines > 1 else [])
    else:
        tpu = slices.get(settings.tpu_slice)
        pools = [pool(machine_resources.MachineSpec(
            machine_type=_MACHINES[tpu.name.split("-")[0]] if not tpu.single_host
            else tpu.machine_type, tpu_topology=tpu.topology), 1, args)]
    return job_types.CustomJob(
        display_name=display_name,
        job_spec=job_types.CustomJobSpec(
            worker_pool_specs=pools, service_account=settings.service_account,
            network=settings.network,
            scheduling=job_types.Scheduling(restart_job_on_worker_restart=True)))


def client(settings: VertexSettings):
    """The Vertex job service for the settings' region (REST; a loopback stand-in in tests)."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

    endpoint = settings.api_endpoint or f"https://{settings.region}-aiplatform.googleapis.com"
    options = {"api_endpoint": endpoint}
    if endpoint.startswith("http://"):  # a stand-in on loopback: no Google credentials
        from google.auth.credentials import AnonymousCredentials

        return JobServiceClient(credentials=AnonymousCredentials(), transport="rest",
                                client_options=options)
    return JobServiceClient(transport="rest", client_options=options)


def _refused(err: Exception, settings: VertexSettings) -> VertexError:
    """An API error (google.api_core's, by HTTP status over REST) as one line naming the setting
    it is about."""
    message = (getattr(err, "message", "") or str(err)).strip()
    message = re.sub(r"^[A-Z]+ \S+: ", "", message.splitlines()[0] if message else "")
    status = getattr(err, "code", None)  # an HTTPStatus over REST (a gRPC code over gRPC)
    http = int(status) if isinstance(status, int) else 0
    grpc_name = getattr(getattr(err, "grpc_status_code", None), "name", "")
    words = message.lower()
    machines = (f"{settings.gpus.accelerator} GPUs on {settings.gpus.machine_type}"
                if settings.gpus else f"{settings.tpu_slice} TPU VMs")
    if http == 429 or grpc_name == "RESOURCE_EXHAUSTED":
        about = (f"quota for {machines} in vertex.region={settings.region} "
                 f"(project {settings.project})")
    elif http in (401, 403) or grpc_name in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
        about = (f"vertex.service_account={settings.service_account or '(the default)'} in "
                 f"vertex.project={settings.project}")
    elif "topology" in words and not settings.gpus:
        about = f"trainer.tpu_slice={settings.tpu_slice}"
    elif "accelerator" in words and settings.gpus:
        about = (f"trainer.gpu_machine_type={settings.gpus.machine_type}, "
                 f"trainer.gpu_accelerator={settings.gpus.accelerator}")
    elif "region" in words or "location" in words:
        about = f"vertex.region={settings.region}"
    else:
        about = settings.where()
    name = grpc_name or getattr(status, "name", "") or type(err).__name__
    return VertexError(f"Vertex AI refused the Trainer's job ({about}): {name}: "
                       f"{message or type(err).__name__}",
                       capacity=(http == 429 or grpc_name == "RESOURCE_EXHAUSTED"
                                 or _says_no_capacity(words)))


def _says_no_capacity(words: str) -> bool:
    return any(w in words for w in ("capacity", "stockout", "insufficient", "not enough resources",
                                    "enough resources available", "quota"))


def _no_capacity(job) -> bool:
    """A job that failed because Vertex had no machines (or no quota) for it."""
    return job.error.code == 8 or _says_no_capacity((job.error.message or "").lower())  # 8: RESOURCE_EXHAUSTED


def fallbacks(exec_properties: dict[str, Any]) -> list:
    """What to submit on when Vertex has no capacity, in order: trainer.fallback_slices (slice
    names) or trainer.fallback_gpu_machines (machine counts); none without a trainer."""
    custom = json.loads(exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "{}")
    trainer_cfg = custom.get(TRAINER_KEY) or {}
    return list(trainer_cfg.get("fallback_gpu_machines") or trainer_cfg.get("fallback_slices")
                or [])


def _kept(exec_properties: dict[str, Any], first: int, then: int, what: str,
          changes: dict[str, Any]) -> tuple[TrainerConfig, dict[str, Any]]:
    """The Trainer's settings and the task's properties on `then` replicas instead of `first`,
    with the accumulation that keeps the global batch (and `changes`); the TrainerConfig's run
    parameters too, which a run's values would otherwise override."""
    custom = json.loads(exec_properties[standard_component_specs.CUSTOM_CONFIG_KEY])
    spec = TrainSpec.from_custom_config(custom, run_parameters=exec_properties)
    steps = spec.trainer.accumulation_steps * first
    if steps % then:
        raise VertexError(f"{what} ({then} replicas) cannot keep the global batch of {first} "
                          f"replicas x {spec.trainer.accumulation_steps} accumulation")
    trainer_cfg = dataclasses.replace(spec.trainer, accumulation_steps=steps // then, **changes)
    properties = {**exec_properties,
                  standard_component_specs.CUSTOM_CONFIG_KEY: json.dumps(
                      dataclasses.replace(spec, trainer=trainer_cfg).to_custom_config()),
                  **{name: getattr(trainer_cfg, name) for name in TRAINER_PARAMETERS
                     if exec_properties.get(name) is not None}}
    return trainer_cfg, properties


def on_fallback(settings: VertexSettings, exec_properties: dict[str, Any],
                fallback) -> tuple[VertexSettings, dict[str, Any], str]:
    """The job's settings and properties on a fallback (a slice name, or a machine count): the
    Trainer's slice or machines and accumulation changed so that the global batch is the first
    shape's; and the line that says so."""
    first_cfg = task_trainer(exec_properties)
    if settings.gpus:
        first, then = settings.gpus, gpu_machines(first_cfg, fallback)
        key, now = "trainer.fallback_gpu_machines", then.describe()
        changes, moved = {"gpu_machines": then.machines}, dataclasses.replace(settings, gpus=then)
    else:
        first, then = slices.get(settings.tpu_slice), slices.get(fallback)
        refusal = launch_refusal(then)
        if refusal:
            raise VertexError(f"trainer.fallback_slices: {then.name}: {refusal}")
        key, now = "trainer.fallback_slices", f"{then.name} ({then.replicas} replicas)"
        changes, moved = {"tpu_slice": then.name}, dataclasses.replace(settings,
                                                                       tpu_slice=then.name)
    trainer_cfg, properties = _kept(exec_properties, first.replicas, then.replicas,
                                    f"{key}: {then.name}", changes)
    if not settings.gpus:
        properties[TPU_SLICE] = then.name
    words = (f"submitting the Trainer's job on {now} with accumulation "
             f"{trainer_cfg.accumulation_steps}, which keeps the global batch of {first.name} "
             f"({first.replicas} replicas x {first_cfg.accumulation_steps}); {key}")
    return moved, properties, words


def _preempted(job) -> bool:
    """A job that failed because its machines were taken away (worth submitting again)."""
    text = (job.error.message or "").lower()
    return job.error.code == 14 or "preempt" in text  # 14: UNAVAILABLE


class Executor(trainer.Executor):
    """Runs the Trainer as a Vertex AI custom job on the slice or machines, and waits for it."""

    def Do(self, input_dict, output_dict, exec_properties):
        settings = VertexSettings.from_exec_properties(exec_properties)
        model_run = artifact_utils.get_single_uri(
            output_dict[standard_component_specs.MODEL_RUN_KEY])
        record = fs.join(model_run, JOB_RECORD)
        service = client(settings)
        left = fallbacks(exec_properties)
        job, on = self._earlier_job(service, record, settings)
        first, properties = settings, exec_properties
        if on is not None and on != _shape_key(settings) and on in left:  # a retry after one
            settings, properties, _ = on_fallback(first, exec_properties, on)
            left = left[left.index(on) + 1:]
        attempts = 0
        while job is None or job.state.name != "JOB_STATE_SUCCEEDED":
            if job is not None and _no_capacity(job) and left:
                why, job = f"job {job.name} ended {job.state.name}: {job.error.message}", None
                settings, properties = self._fall_back(first, exec_properties, left, why)
            if job is not None:  # it ended without success
                if not _preempted(job) or attempts >= settings.resubmits:
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
                settings, properties = self._fall_back(first, exec_properties, left,
                                                       str(refused))
                job = None  # nothing runs: submit on the fallback
                continue
            job = self._wait(service, job.name, settings)
        _log.info("Vertex AI job %s succeeded", job.name)

    @staticmethod
    def _fall_back(first: VertexSettings, exec_properties, left: list, why: str):
        """The next fallback's settings and properties (taken off `left`), said."""
        settings, properties, words = on_fallback(first, exec_properties, left.pop(0))
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
        except Exception as err:  # noqa: BLE001  google.api_core's errors, by status
            raise _refused(err, settings) from None
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
            except Exception as err:  # noqa: BLE001
                raise _refused(err, settings) from None
            if job.state.name in _TERMINAL:
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
