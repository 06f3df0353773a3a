"""LatestPushedModel: the baseline, found by looking in the serving directory, not by a Resolver.

TFX's Resolver (LatestBlessedModelStrategy) compiles for Kubeflow but open-source KFP cannot run it.
This component runs the same everywhere: it lists the Pusher's serving directory and takes the
newest complete version (its push record written last, a SavedModel that parses:
components/serving_versions.py), the model a server is serving. The Evaluator scores it beside the
candidate on the current eval split, so the candidate must not be worse than what serves now, on
the same rows; a metric recorded at an old push was measured on other data and chooses nothing.
A version that answers another label or task (its push record's target against this run's)
fails the run with one line (serving_versions.check_target): a serving dir serves one pipeline.
It emits that version as a Model artifact. With none pushed yet it emits an empty Model marked `found = 0`, which the
Evaluator treats as "no baseline" and the Trainer as "no warm start".

A version whose files are no longer what was pushed (their sha256 against its push record: a disk
fault, a hand edit) is never the baseline: the next older intact version is, and the artifact
says which versions were passed over and why (PASSED_OVER_KEY), for the run's summary.

Its output depends on the world outside the pipeline, so the runners turn caching off for it.
"""

from __future__ import annotations

import json

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import io_utils, path_utils

from components import serving_versions

FOUND_KEY = "found"
SOURCE_KEY = "pushed_destination"
PASSED_OVER_KEY = "passed_over"  # newer versions not taken, and why: one line


def baseline_version(serving_dir: str) -> tuple[serving_versions.Version | None, str]:
    """(version, passed over): the newest complete version under serving_dir whose files are
    what was pushed (None: none is), and a line naming the newer ones that are not ("" when
    none)."""
    passed = []
    for version in reversed(serving_versions.versions(serving_dir)):
        if serving_versions.content_hash(version.path) == version.record.get("sha256"):
            break
        passed.append(version.number)
    else:
        version = None
    note = (f"version {', '.join(map(str, passed))} passed over: its files are not what was "
            "pushed (sha256 against its push record); a model server would serve it: remove it"
            if passed else "")
    return version, note


def is_found(model_artifact) -> bool:
    return bool(model_artifact.get_int_custom_property(FOUND_KEY))


class LatestPushedModelSpec(ComponentSpec):
    PARAMETERS = {"serving_dir": ExecutionParameter(type=str),
                  # what this run's model answers (serving_versions.target), as JSON
                  "target": ExecutionParameter(type=str)}
    INPUTS = {}
    OUTPUTS = {"model": ChannelParameter(type=standard_artifacts.Model)}


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        model = artifact_utils.get_single_instance(output_dict["model"])
        serving_dir = exec_properties["serving_dir"]
        version, passed_over = baseline_version(serving_dir)
        if passed_over:
            logging.warning("Serving dir %s: %s", serving_dir, passed_over)
            model.set_string_custom_property(PASSED_OVER_KEY, passed_over)
        if version is None:
            logging.info("No pushed model under %s yet.", serving_dir)
            model.set_int_custom_property(FOUND_KEY, 0)
            fileio.makedirs(model.uri)
            return
        serving_versions.check_target(serving_dir, version.number, version.record,
                                      json.loads(exec_properties.get("target") or "{}"))
        io_utils.copy_dir(version.path, path_utils.serving_model_path(model.uri))
        model.set_int_custom_property(FOUND_KEY, 1)
        model.set_string_custom_property(SOURCE_KEY, version.path)
        logging.info("Latest pushed model: %s", version.path)


class LatestPushedModel(base_component.BaseComponent):
    SPEC_CLASS = LatestPushedModelSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, serving_dir: str, target: str = ""):
        super().__init__(spec=LatestPushedModelSpec(
            serving_dir=serving_dir, target=target,
            model=types.Channel(type=standard_artifacts.Model)))
