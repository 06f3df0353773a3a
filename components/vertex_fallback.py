"""What the Trainer's Vertex AI job is submitted on when Vertex has no capacity for its first
shape (components/vertex_training.py): trainer.fallback_slices or trainer.fallback_gpu_machines,
in order, each with the accumulation that keeps the first shape's global batch."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tfx.types import standard_component_specs

from components.vertex_job import (TPU_SLICE, VertexError, VertexSettings, gpu_machines,
                                   launch_refusal)
from trainer_module import slices
from trainer_module.custom_config import TrainSpec
from trainer_module.settings import RUN_PARAMETERS as TRAINER_PARAMETERS
from trainer_module.settings import TrainerConfig

def fallbacks(trainer_cfg: TrainerConfig | None) -> list:
    """What to submit on when Vertex has no capacity, in order: trainer.fallback_slices (slice
    names) or trainer.fallback_gpu_machines (machine counts); none without a trainer."""
    if trainer_cfg is None:
        return []
    return list(trainer_cfg.fallback_gpu_machines or trainer_cfg.fallback_slices or [])


def _kept(spec: TrainSpec, exec_properties: dict[str, Any], first: int, then: int, what: str,
          changes: dict[str, Any]) -> tuple[TrainerConfig, dict[str, Any]]:
    """The Trainer's settings and the task's properties on `then` replicas instead of `first`,
    with the accumulation that keeps the global batch (and `changes`); the TrainerConfig's run
    parameters too, which a run's values would otherwise override."""
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


def on_fallback(settings: VertexSettings, exec_properties: dict[str, Any], spec: TrainSpec,
                fallback) -> tuple[VertexSettings, dict[str, Any], str]:
    """The job's settings and properties on a fallback (a slice name, or a machine count): the
    Trainer's slice or machines and accumulation changed so that the global batch is the first
    shape's; and the line that says so. spec: the task's TrainSpec, as the executor decoded it."""
    first_cfg = spec.trainer
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
    trainer_cfg, properties = _kept(spec, exec_properties, first.replicas, then.replicas,
                                    f"{key}: {then.name}", changes)
    if not settings.gpus:
        properties[TPU_SLICE] = then.name
    words = (f"submitting the Trainer's job on {now} with accumulation "
             f"{trainer_cfg.accumulation_steps}, which keeps the global batch of {first.name} "
             f"({first.replicas} replicas x {first_cfg.accumulation_steps}); {key}")
    return moved, properties, words
