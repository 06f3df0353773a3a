"""Several GPU machines for one Trainer: what `trainer.gpu_machines` and its keys ask Vertex AI for.

`trainer.gpu_machines = 4` with `trainer.gpu_machine_type = "a2-highgpu-8g"` is 4 machines of 8
A100s each: 32 replicas, a chief and 3 workers under MultiWorkerMirroredStrategy, each machine's
input pipeline reading its own share of the files (components/vertex_training.py submits them as
one Vertex AI custom job). The GPUs come from the machine type where Vertex's type names them (A2,
A3: `<family>-<N>g`, N GPUs; G2: L4s by vCPUs), else from `trainer.gpu_accelerator` (Vertex's
accelerator type) and `trainer.gpus_per_machine`, which also override the type's.
"""

from __future__ import annotations

import dataclasses
import re

from trainer_module.settings import TrainerConfig

# Vertex AI's GPU machine types that name their GPUs ("Configure compute resources for custom
# training", GPUs): A2 and A3 by family, N GPUs in "<family>-<N>g"; G2 by its vCPUs.
# A GPU's memory in GiB, by Vertex AI's accelerator type (0 where not listed: not checked).
GPU_GIB = {"NVIDIA_TESLA_A100": 40, "NVIDIA_A100_80GB": 80, "NVIDIA_H100_80GB": 80,
           "NVIDIA_H100_MEGA_80GB": 80, "NVIDIA_L4": 24, "NVIDIA_TESLA_T4": 16,
           "NVIDIA_TESLA_V100": 16, "NVIDIA_TESLA_P100": 16, "NVIDIA_TESLA_P4": 8}
FAMILIES = {"a2-highgpu": "NVIDIA_TESLA_A100", "a2-megagpu": "NVIDIA_TESLA_A100",
            "a2-ultragpu": "NVIDIA_A100_80GB", "a3-highgpu": "NVIDIA_H100_80GB",
            "a3-megagpu": "NVIDIA_H100_MEGA_80GB"}
G2_L4S = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}


class GpuMachinesError(ValueError):
    """The machines asked for cannot be had; one line naming the key."""


def named_gpus(machine_type: str) -> tuple[str, int]:
    """(accelerator type, GPUs) that the machine type names; ("", 0) when it names none."""
    family = re.fullmatch(r"(a[23]-[a-z]+gpu)-(\d+)g", machine_type)
    if family and family.group(1) in FAMILIES:
        return FAMILIES[family.group(1)], int(family.group(2))
    g2 = re.fullmatch(r"g2-standard-(\d+)", machine_type)
    if g2 and int(g2.group(1)) in G2_L4S:
        return "NVIDIA_L4", G2_L4S[int(g2.group(1))]
    return "", 0


def accelerator_types() -> list[str]:
    """Vertex AI's GPU accelerator types, by the SDK's own enum."""
    from google.cloud.aiplatform_v1.types import accelerator_type

    return [kind.name for kind in accelerator_type.AcceleratorType
            if kind.name.startswith("NVIDIA_")]


@dataclasses.dataclass(frozen=True)
class GpuMachines:
    machines: int
    machine_type: str
    accelerator: str
    per_machine: int

    @classmethod
    def of(cls, trainer: TrainerConfig, machines: int | None = None,
           check: bool = True) -> "GpuMachines":
        """trainer.gpu_machines' machines (or `machines` of them, a fallback count). check: the
        accelerator against the SDK's types (2 s of imports: the plan, which only counts, does
        without)."""
        named, count = named_gpus(trainer.gpu_machine_type)
        accelerator = trainer.gpu_accelerator or named
        per_machine = trainer.gpus_per_machine or count
        if not accelerator or not per_machine:
            raise GpuMachinesError(
                f"trainer.gpu_machine_type={trainer.gpu_machine_type} does not name its GPUs: "
                "set trainer.gpu_accelerator (Vertex AI's accelerator type, e.g. "
                "NVIDIA_TESLA_T4) and trainer.gpus_per_machine")
        known = accelerator_types() if check else [accelerator]
        if accelerator not in known:
            raise GpuMachinesError(f"trainer.gpu_accelerator={accelerator} is not one of Vertex "
                                   f"AI's GPU types ({', '.join(known)})")
        return cls(machines or trainer.gpu_machines, trainer.gpu_machine_type, accelerator,
                   per_machine)

    @property
    def replicas(self) -> int:
        return self.machines * self.per_machine

    @property
    def name(self) -> str:
        return f"{self.machines} x {self.machine_type}"

    def describe(self) -> str:
        return (f"{self.name} ({self.per_machine} {self.accelerator} each: {self.replicas} "
                "replicas)")
