"""Trainer whose main knobs are execution parameters, so a Kubeflow run can override them.

TFX's Trainer takes its settings as `custom_config` (one JSON string) and protos; a Kubeflow
runtime parameter can only stand for a whole top-level execution property. This Trainer adds the
TrainerConfig fields marked as run parameters (trainer_module/settings.py, RUN_PARAMETERS) as
their own properties; compiled for
Kubeflow they are pipeline parameters (`lockstep submit --param train_steps=500`), and the
executor folds whatever values a run gets into the custom config with the trainer's own codec
(TrainSpec.from_custom_config), which refuses unknown or mistyped keys.
"""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import json_utils

from components.compat import tft as tft_compat, tfx as tfx_compat
from components import serving_check
from components.memory import release_free_memory
from trainer_module.settings import RUN_PARAMETERS
from trainer_module.custom_config import TRAIN_SPEC, TrainSpec


class TrainerSpec(standard_component_specs.TrainerSpec):
    PARAMETERS = {
        **standard_component_specs.TrainerSpec.PARAMETERS,
        **{name: ExecutionParameter(type=kind, optional=True)
           for name, kind in RUN_PARAMETERS.items()},
    }


class Executor(tfx_compat.FnArgsHook, trainer_executor.GenericExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        serving_check.training_begins()  # its import beside the training, if a runner asked
        try:
            # The transform graph's load and its applications: components/compat/tft.py.
            with tft_compat.outputs_sourced_once(), tft_compat.transforms_pruned_once():
                return super().Do(input_dict, output_dict, exec_properties)
        finally:
            release_free_memory()

    def fn_args(self, fn_args, exec_properties: dict[str, Any]):
        """The TrainSpec decoded once, with the run's parameters, and handed on to run_fn
        (`TRAIN_SPEC`); the custom_config is its encoding, for anything else that reads it."""
        spec = TrainSpec.from_custom_config(fn_args.custom_config or {},
                                            run_parameters=exec_properties)
        fn_args.custom_config = spec.to_custom_config()
        setattr(fn_args, TRAIN_SPEC, spec)
        return fn_args


class Trainer(base_component.BaseComponent):
    """run_fn by dotted path; `parameters` maps RUN_PARAMETERS names to values or
    RuntimeParameters."""

    SPEC_CLASS = TrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, examples: types.BaseChannel, transform_graph: types.BaseChannel,
                 schema: types.BaseChannel, run_fn: str, custom_config: dict[str, Any],
                 base_model: types.BaseChannel | None = None,
                 parameters: dict[str, Any] | None = None,
                 extra_parameters: dict[str, Any] | None = None):
        """extra_parameters: a subclass's own execution properties (its SPEC_CLASS's)."""
        unknown = set(parameters or {}) - set(RUN_PARAMETERS)
        if unknown:
            raise ValueError(f"unknown trainer parameter(s): {', '.join(sorted(unknown))}")
        spec = self.SPEC_CLASS(
            examples=examples, transform_graph=transform_graph, schema=schema,
            base_model=base_model, train_args=trainer_pb2.TrainArgs(),
            eval_args=trainer_pb2.EvalArgs(), run_fn=run_fn,
            custom_config=json_utils.dumps(custom_config),
            model=types.Channel(type=standard_artifacts.Model),
            model_run=types.Channel(type=standard_artifacts.ModelRun),
            **(parameters or {}), **(extra_parameters or {}))
        super().__init__(spec=spec)
