"""LatestPushedModel: the newest blessed, pushed model, found by looking, not by a Resolver node.

TFX's Resolver (LatestBlessedModelStrategy) compiles for Kubeflow but open-source KFP cannot run it.
This component runs the same everywhere: it lists the Pusher's serving directory, takes the newest
complete version (saved_model.pb is copied last, so its presence means the copy finished), and
emits it as a Model artifact. With none pushed yet it emits an empty Model marked `found = 0`,
which the Evaluator treats as "no baseline" and the Trainer as "no warm start".

Its output depends on the world outside the pipeline, so the runners turn caching off for it.
"""

from __future__ import annotations

import os

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import io_utils, path_utils

FOUND_KEY = "found"
SOURCE_KEY = "pushed_destination"


def latest_pushed_version(serving_dir: str) -> str | None:
    """The newest complete version directory under serving_dir, or None."""
    if not serving_dir or not fileio.exists(serving_dir):
        return None
    versions = []
    for name in fileio.listdir(serving_dir):
        name = name.rstrip("/")
        if name.isdigit() and fileio.exists(os.path.join(serving_dir, name, "saved_model.pb")):
            versions.append(int(name))
    return os.path.join(serving_dir, str(max(versions))) if versions else None


def is_found(model_artifact) -> bool:
    return bool(model_artifact.get_int_custom_property(FOUND_KEY))


class LatestPushedModelSpec(ComponentSpec):
    PARAMETERS = {"serving_dir": ExecutionParameter(type=str)}
    INPUTS = {}
    OUTPUTS = {"model": ChannelParameter(type=standard_artifacts.Model)}


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        model = artifact_utils.get_single_instance(output_dict["model"])
        source = latest_pushed_version(exec_properties["serving_dir"])
        if source is None:
            logging.info("No pushed model under %s yet.", exec_properties["serving_dir"])
            model.set_int_custom_property(FOUND_KEY, 0)
            fileio.makedirs(model.uri)
            return
        io_utils.copy_dir(source, path_utils.serving_model_path(model.uri))
        model.set_int_custom_property(FOUND_KEY, 1)
        model.set_string_custom_property(SOURCE_KEY, source)
        logging.info("Latest pushed model: %s", source)


class LatestPushedModel(base_component.BaseComponent):
    SPEC_CLASS = LatestPushedModelSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, serving_dir: str):
        super().__init__(spec=LatestPushedModelSpec(
            serving_dir=serving_dir, model=types.Channel(type=standard_artifacts.Model)))
