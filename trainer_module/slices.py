"""TPU slice presets: a name like `v5e-4` or `v4-32` as GKE sees it and as the Trainer sees it.

GKE schedules a TPU pod by two node labels, `cloud.google.com/gke-tpu-accelerator` and
`cloud.google.com/gke-tpu-topology`, and a `google.com/tpu` resource request of the chips on one
host. TensorFlow's TPUStrategy makes one replica per chip (v4 and v5p chips are megacores: two
TensorCores that TF drives as one device, which is why their names count cores, twice the chips).

Names follow Cloud TPU's: v5e-N and v6e-N count chips, v4-N and v5p-N count TensorCores.
"""

from __future__ import annotations

import dataclasses

from runtime import exit_status

ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_RESOURCE = "google.com/tpu"


class SliceError(ValueError):
    """An unknown slice name; the message lists the known ones."""

    lockstep_exit_status = exit_status.INPUT


@dataclasses.dataclass(frozen=True)
class TpuSlice:
    name: str
    accelerator: str  # the gke-tpu-accelerator node label
    topology: str  # the gke-tpu-topology node label
    chips: int
    chips_per_host: int
    machine_type: str  # the GKE node pool's machine type for this slice

    @property
    def hosts(self) -> int:
        return self.chips // self.chips_per_host

    @property
    def replicas(self) -> int:
        """num_replicas_in_sync under TPUStrategy: one per chip."""
        return self.chips

    @property
    def single_host(self) -> bool:
        return self.hosts == 1

    def node_selector(self) -> dict[str, str]:
        return {ACCELERATOR_LABEL: self.accelerator, TOPOLOGY_LABEL: self.topology}

    def describe(self) -> str:
        return (f"{self.name}: {self.chips} chip(s) on {self.hosts} host(s), topology "
                f"{self.topology}, {self.accelerator} ({self.machine_type}), "
                f"{self.replicas} replicas")


def _family(prefix: str, accelerator: str, shapes: list[tuple[int, str, int, str]],
            cores_per_chip: int) -> dict[str, TpuSlice]:
    out = {}
    for chips, topology, per_host, machine in shapes:
        name = f"{prefix}-{chips * cores_per_chip}"
        out[name] = TpuSlice(name, accelerator, topology, chips, per_host, machine)
    return out


def _v5e_like(prefix: str, accelerator: str, machine: str) -> dict[str, TpuSlice]:
    shapes = [(1, "1x1", 1, f"{machine}-1t"), (4, "2x2", 4, f"{machine}-4t"),
              (8, "2x4", 8, f"{machine}-8t")]
    shapes += [(c, t, 4, f"{machine}-4t") for c, t in
               ((16, "4x4"), (32, "4x8"), (64, "8x8"), (128, "8x16"), (256, "16x16"))]
    return _family(prefix, accelerator, shapes, 1)


def _megacore(prefix: str, accelerator: str, machine: str) -> dict[str, TpuSlice]:
    shapes = [(c, t, 4, machine) for c, t in
              ((4, "2x2x1"), (8, "2x2x2"), (16, "2x2x4"), (32, "2x4x4"), (64, "4x4x4"))]
    return _family(prefix, accelerator, shapes, 2)


PRESETS: dict[str, TpuSlice] = {
    **_v5e_like("v5e", "tpu-v5-lite-podslice", "ct5lp-hightpu"),
    **_v5e_like("v6e", "tpu-v6e-slice", "ct6e-standard"),
    **_megacore("v4", "tpu-v4-podslice", "ct4p-hightpu-4t"),
    **_megacore("v5p", "tpu-v5p-slice", "ct5p-hightpu-4t"),
}


# A replica's memory (a chip's HBM: v4 and v5p chips are one device of two cores), by the
# accelerator label (Cloud TPU's system architecture pages).
HBM_GIB = {"tpu-v5-lite-podslice": 16, "tpu-v6e-slice": 32, "tpu-v4-podslice": 32,
           "tpu-v5p-slice": 95}


def replica_bytes(tpu: TpuSlice) -> int:
    """The memory of one replica of the slice (0: not known)."""
    return HBM_GIB.get(tpu.accelerator, 0) << 30


def get(name: str) -> TpuSlice:
    key = name.strip().lower().replace("v5litepod", "v5e")
    if key not in PRESETS:
        raise SliceError(f"unknown TPU slice {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[key]
