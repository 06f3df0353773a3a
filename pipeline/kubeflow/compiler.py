"""Compiles the pipeline for Kubeflow Pipelines v2 with KubeflowV2DagRunner, then makes the spec
one that open-source KFP on GKE runs as we mean it:

- no Resolver executor (OSS KFP cannot run one; LatestPushedModel finds the baseline instead);
- KFP's cache off for the nodes whose output depends on the world outside the pipeline: the
  ExampleGen (new files or a new span under the same data root) and LatestPushedModel;
- resources per task, and for the Trainer an accelerator plus, in the Kubernetes platform spec
  (the format the kfp-kubernetes extension writes), the GKE node selectors that put it on the
  TPU (or GPU) node pool; every other task stays on CPU nodes. A multi-host TPU slice's Trainer
  task, or several GPU machines', stays on a CPU node too: it submits its training as a Vertex AI
  job and waits (components/vertex_training.py); a slice Vertex cannot launch, or GPUs it does
  not know, are refused here;
- the pipeline root as the spec's default root.

The output is the two-document YAML `kfp.Client` accepts: the PipelineSpec, then the PlatformSpec.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from importlib import metadata as importlib_metadata

import yaml
from google.protobuf import json_format, struct_pb2
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from components import csv_format, entrypoint, vertex_job
from trainer_module import slices
from pipeline import definition
from pipeline.binding import Binding
from pipeline.config import Config, ConfigError

ResourceSpec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec
TRAINER_NODE = definition.TRAINER_NODE
GPU_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GPU_RESOURCE = "nvidia.com/gpu"


class CompileError(ConfigError):
    """A setting that cannot be compiled; the message names it."""


@dataclasses.dataclass(frozen=True)
class Compiled:
    pipeline_spec: pipeline_spec_pb2.PipelineSpec
    platform_spec: pipeline_spec_pb2.PlatformSpec
    image: str

    def to_yaml(self) -> str:
        docs = [json_format.MessageToDict(self.pipeline_spec),
                json_format.MessageToDict(self.platform_spec)]
        return yaml.safe_dump_all(docs, sort_keys=False)


def package_version() -> str:
    try:
        return importlib_metadata.version("lockstep-pipeline")
    except importlib_metadata.PackageNotFoundError:
        return "0.0.0"


def image_name(config: Config, image: str | None = None) -> str:
    """--image as given; else kubeflow.image by digest (kubeflow.image_digest), which pins the
    exact bytes every run pulls; else by tag (kubeflow.image_tag, or the package version)."""
    if image:
        return image
    name = config.kubeflow.image
    if ":" in name.rsplit("/", 1)[-1] or "@" in name:
        return name
    if config.kubeflow.image_digest:
        return f"{name}@{config.kubeflow.image_digest}"
    return f"{name}:{config.kubeflow.image_tag or package_version()}"


_MEMORY_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                 "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
                 "Ei": 2**60}
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)([A-Za-z]*)$")


def _cpu_cores(cpu: str) -> float:
    """Kubernetes CPU quantity to cores: "4" is 4.0, "500m" is 0.5."""
    match = _QUANTITY.match(cpu)
    if not match or match.group(2) not in ("", "m"):
        raise ValueError(cpu)
    return float(match.group(1)) / (1000 if match.group(2) else 1)


def _memory_gb(memory: str) -> float:
    """Kubernetes memory quantity to GB (10^9 bytes), as KFP's float fields count it."""
    match = _QUANTITY.match(memory)
    if not match or match.group(2) not in _MEMORY_UNITS:
        raise ValueError(memory)
    return float(match.group(1)) * _MEMORY_UNITS[match.group(2)] / 10**9


def _resources(cpu: str, memory: str) -> ResourceSpec:
    try:
        cpu_value, memory_value = _cpu_cores(cpu), _memory_gb(memory)
    except ValueError:
        raise CompileError(f"bad CPU {cpu!r} or memory {memory!r} (use e.g. '4', '500m', '16G')") from None
    # The string fields are what KFP >= 2.4 reads; the float ones serve older backends.
    return ResourceSpec(cpu_request=cpu_value, cpu_limit=cpu_value, resource_cpu_request=cpu,
                        resource_cpu_limit=cpu, memory_request=memory_value,
                        memory_limit=memory_value, resource_memory_request=memory,
                        resource_memory_limit=memory)


def _trainer_placement(config: Config) -> tuple[ResourceSpec, k8s_pb2.KubernetesExecutorConfig]:
    k = config.kubeflow
    resources = _resources(k.trainer_cpu, k.trainer_memory)
    k8s = k8s_pb2.KubernetesExecutorConfig()
    if config.trainer.tpu_slice and definition.multi_host(config):
        tpu = slices.get(config.trainer.tpu_slice)
        refusal = vertex_job.launch_refusal(tpu)
        if refusal:
            raise CompileError(f"trainer.tpu_slice={tpu.name} spans {tpu.hosts} hosts, so its "
                               f"Trainer runs as a Vertex AI custom job, but {refusal}")
    elif config.trainer.gpu_machines:  # the task waits on a CPU node for its GPU machines
        try:
            vertex_job.gpu_machines(config.trainer)
        except vertex_job.VertexError as err:
            raise CompileError(str(err)) from None
    elif config.trainer.tpu_slice:
        tpu = slices.get(config.trainer.tpu_slice)
        resources.accelerator.CopyFrom(ResourceSpec.AcceleratorConfig(
            type=slices.TPU_RESOURCE, count=tpu.chips_per_host,
            resource_type=slices.TPU_RESOURCE, resource_count=str(tpu.chips_per_host)))
        k8s.node_selector.labels.update(tpu.node_selector())
        k8s.tolerations.append(k8s_pb2.Toleration(
            key=slices.TPU_RESOURCE, operator="Exists", effect="NoSchedule"))
    elif k.gpus:
        resources.accelerator.CopyFrom(ResourceSpec.AcceleratorConfig(
            type=GPU_RESOURCE, count=k.gpus, resource_type=GPU_RESOURCE,
            resource_count=str(k.gpus)))
        if k.gpu_type:
            k8s.node_selector.labels[GPU_ACCELERATOR_LABEL] = k.gpu_type
        k8s.tolerations.append(k8s_pb2.Toleration(
            key=GPU_RESOURCE, operator="Exists", effect="NoSchedule"))
    return resources, k8s


MAX_RETRY_BACKOFF_SECONDS = 3600


def _retry_trainer(task: pipeline_spec_pb2.PipelineTaskSpec, config: Config) -> None:
    """KFP retries the Trainer when its pod dies (a preempted TPU or GPU node). The retry runs
    with the same executor input, so the same ModelRun URI, where the checkpoints are
    (trainer_module/train.py): it resumes from the last one."""
    k = config.kubeflow
    if not k.trainer_retries:
        return
    task.retry_policy.max_retry_count = k.trainer_retries
    task.retry_policy.backoff_duration.seconds = k.trainer_retry_backoff_seconds
    task.retry_policy.backoff_factor = 2.0
    task.retry_policy.backoff_max_duration.seconds = MAX_RETRY_BACKOFF_SECONDS


def parameter_defaults(config: Config, input_base: str) -> dict[str, str | int | float]:
    """The pipeline's runtime parameters and their compiled-in values."""
    return {definition.DATA_ROOT_PARAMETER: input_base, **definition.run_parameter_values(config),
            **definition.vertex_run_parameter_values(config)}


def compile_pipeline(config: Config, decisions, image: str | None = None, *,
                     binding: Binding, never_cached: tuple[str, ...]) -> Compiled:
    """config: absolutized; decisions: pipeline/preflight.py's for it. binding: what the
    orchestrator provides (run parameters); never_cached: the tasks its cache must not serve
    (pipeline/orchestrators/kubeflow_cluster.py)."""
    trainer_resources, trainer_k8s = _trainer_placement(config)
    other = _resources(config.kubeflow.component_cpu, config.kubeflow.component_memory)
    input_base, pattern = csv_format.locate(config.data.path, config.data.span_pattern)
    image = image_name(config, image)
    tfx_pipeline = definition.create_pipeline(config, input_base, pattern, decisions,
                                                binding=binding, image=image)
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
            default_image=image, use_pipeline_spec_2_1=True))
    job = runner.run(tfx_pipeline, write_out=False)
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    executors = spec.deployment_spec.fields["executors"].struct_value.fields
    resolvers = [label for label, executor in executors.items()
                 if "resolver" in executor.struct_value.fields]
    if resolvers:  # would run on Vertex only
        raise CompileError(f"the spec has Resolver executors ({', '.join(resolvers)}); "
                           "open-source KFP cannot run them")
    # KubeflowV2DagRunner leaves runtime parameters without defaults (Vertex takes them from the
    # PipelineJob); OSS KFP reads them from the spec's root inputs, so they go there.
    for name, value in parameter_defaults(config, input_base).items():
        parameter = spec.root.input_definitions.parameters[name]
        parameter.default_value.CopyFrom(struct_pb2.Value(
            string_value=value) if isinstance(value, str) else struct_pb2.Value(number_value=value))
        parameter.is_optional = True
    for node, component in spec.components.items():
        container = executors[component.executor_label].struct_value.fields["container"].struct_value
        resources = trainer_resources if node == TRAINER_NODE else other
        container.fields["resources"].struct_value.Clear()
        container.fields["resources"].struct_value.update(json_format.MessageToDict(resources))
        # TFX's entrypoint, started lean (components/entrypoint.py): same arguments, same work.
        container.fields["command"].list_value.Clear()
        container.fields["command"].list_value.extend(entrypoint.COMMAND)
        # The ExampleGen's driver hook (Vertex-only; OSS KFP skips it) would resolve spans its own
        # way; the executor resolves them on every orchestrator, so the hook goes.
        if "lifecycle" in container.fields:
            del container.fields["lifecycle"]
    for node in never_cached:
        spec.root.dag.tasks[node].caching_options.enable_cache = False
    _retry_trainer(spec.root.dag.tasks[TRAINER_NODE], config)
    spec.default_pipeline_root = config.paths.pipeline_root

    platform = pipeline_spec_pb2.PlatformSpec()
    if trainer_k8s.ByteSize():
        label = spec.components[TRAINER_NODE].executor_label
        platform.platforms["kubernetes"].deployment_spec.executors[label].update(
            json_format.MessageToDict(trainer_k8s))
    return Compiled(spec, platform, image)


def write(compiled: Compiled, output: str) -> None:
    """Atomically: a failed write leaves no half-written spec behind."""
    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".pipeline-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(compiled.to_yaml())
        os.replace(tmp, output)
    except BaseException:
        os.unlink(tmp)
        raise


def compile_in_fresh_process(config: Config, output: str, image: str | None = None) -> None:
    """`lockstep compile` of this config in a process of its own (it loads import stand-ins,
    pipeline/kubeflow/import_stubs.py, which must never be where a pipeline runs). Raises CompileError
    with compile's one-line message if it fails."""
    import subprocess

    from pipeline import entry_point

    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    settings = os.path.join(directory, "config.yaml")
    with open(settings, "w") as handle:
        yaml.safe_dump(config.to_dict(), handle, sort_keys=False)
    command = [*entry_point.command(), "compile", "--config", settings,
               "--output", output] + (["--image", image] if image else [])
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise CompileError((result.stderr.strip().splitlines() or ["compile failed"])[-1]
                           .removeprefix("lockstep: error: "))

