"""The Vertex AI custom job that runs the Trainer on a multi-host TPU slice or several GPU
machines (components/vertex_training.py submits it): the task's properties that configure it, its
settings (`VertexSettings`), which slices Vertex can launch (written once here, `launch_refusal`),
and the job itself, built with the Vertex SDK's own types (`custom_job`, `container_args`)."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

from tfx.types import artifact_utils, standard_component_specs

from components import entrypoint
from components.gpu_machines import GpuMachines, GpuMachinesError
from trainer_module import slices
from trainer_module.custom_config import TRAINER_KEY, TrainSpec
from trainer_module.settings import TrainerConfig

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
    def from_exec_properties(cls, properties: dict[str, Any],
                             spec: TrainSpec | None) -> "VertexSettings":
        """spec: the task's TrainSpec (`task_spec`, decoded once by the executor)."""
        trainer_cfg = spec.trainer if spec else None
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


def task_spec(properties: dict[str, Any]) -> TrainSpec | None:
    """The task's TrainSpec, read by the codec from its custom_config with the run's parameters
    (None without a trainer's settings there): the executor decodes it once and hands it on."""
    custom = json.loads(properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "{}")
    if not custom.get(TRAINER_KEY):
        return None
    return TrainSpec.from_custom_config(custom, run_parameters=properties)


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
