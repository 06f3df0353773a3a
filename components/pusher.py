"""Pusher: publishes a blessed model into the serving directory, atomically and once.

TFX's Pusher writes each file in place under the final version number, and pushes the same model
again on every run that blesses it. This one pushes through components/serving_versions.py: a
temporary copy, fsync, the serving smoke test on a few eval examples (components/serving_check.py:
the Evaluator ran it on this content beside TFMA, so the copy need only have the content it checked;
without that verdict the copy is checked here, in a subprocess), then a rename to a fresh version
number; content pushed before is not pushed again. Its output carries `pushed`,
`pushed_destination` and `push_note` (what happened,
in a line for the run summary).
"""

from __future__ import annotations

import json

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import path_utils

from components import evaluator, serving_check, serving_versions
from components.csv_example_gen import DATA_FINGERPRINT_KEY, SPANS_KEY

PUSHED_KEY = "pushed"
DESTINATION_KEY = "pushed_destination"
NOTE_KEY = "push_note"
GATE_KEY = "gate"


class PusherSpec(ComponentSpec):
    PARAMETERS = {
        "serving_dir": ExecutionParameter(type=str),
        "keep_versions": ExecutionParameter(type=int),
        # The gating metric, recorded with the version so that later runs can pick the best
        # recent model as their baseline (components/latest_model.py).
        "metric_name": ExecutionParameter(type=str),
        "higher_is_better": ExecutionParameter(type=int),
        # The run's gate as JSON (pipeline/evaluation.py, Gate.to_dict): echoed on the output
        # as `gate`, so a report of this run, read back later, says what the model had to beat.
        "gate": ExecutionParameter(type=str),
        # What the model answers (serving_versions.target), as JSON: recorded with the version,
        # so that a run of another label refuses this serving dir (components/latest_model.py).
        "target": ExecutionParameter(type=str),
    }
    INPUTS = {
        "model": ChannelParameter(type=standard_artifacts.Model),
        "model_blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
        "examples": ChannelParameter(type=standard_artifacts.Examples),
        "evaluation": ChannelParameter(type=standard_artifacts.ModelEvaluation),
    }
    OUTPUTS = {"pushed_model": ChannelParameter(type=standard_artifacts.PushedModel)}


def gating_metric(evaluation_uri: str, name: str) -> float | None:
    """The candidate's value of `name` on the whole eval split, from TFMA's output."""
    try:
        return evaluator.read_metrics(evaluation_uri)[0].get(name)
    except Exception as err:  # noqa: BLE001  no metric recorded: the push goes on without it
        logging.warning("No %s in %s: %s", name, evaluation_uri, err)
        return None


def serving_test(blessing, source: str, digest: str, example_files: list[str]):
    """The check a copy of `source` (whose content hash is `digest`) must pass: the same content
    as the Evaluator checked, if it checked it (and it passed); else the smoke test itself. Each
    raises ServingCheckFailed."""
    verdict = blessing.get_string_custom_property(serving_check.VERDICT_KEY)
    checked = blessing.get_string_custom_property(serving_check.CHECKED_SHA_KEY)
    if not verdict or checked != digest:
        return lambda path: serving_check.run(path, example_files)

    def same_content(path: str) -> None:
        if verdict != serving_check.PASSED:
            raise serving_check.ServingCheckFailed(verdict)
        if serving_versions.content_hash(path) != checked:
            raise serving_check.ServingCheckFailed(
                f"the copy at {path} differs from the checked model {source}")
    return same_content


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        model = artifact_utils.get_single_instance(input_dict["model"])
        blessing = artifact_utils.get_single_instance(input_dict["model_blessing"])
        out = artifact_utils.get_single_instance(output_dict["pushed_model"])
        out.set_int_custom_property(PUSHED_KEY, 0)
        out.set_string_custom_property(GATE_KEY, exec_properties.get("gate") or "")
        if not blessing.get_int_custom_property("blessed"):
            out.set_string_custom_property(NOTE_KEY, "not blessed")
            logging.info("Model %s is not blessed; not pushed.", model.uri)
            return
        target = exec_properties["serving_dir"]
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        source = path_utils.serving_model_path(model.uri)
        digest = serving_versions.content_hash(source)
        check = serving_test(blessing, source, digest, serving_check.eval_example_files(examples))
        trained_on = {}
        if examples.has_custom_property(SPANS_KEY):
            trained_on = {
                "spans": [int(s) for s in examples.get_string_custom_property(SPANS_KEY).split(",")],
                "fingerprint": examples.get_string_custom_property(DATA_FINGERPRINT_KEY)}
        name = exec_properties["metric_name"]
        value = gating_metric(
            artifact_utils.get_single_instance(input_dict["evaluation"]).uri, name)
        metric = {"name": name, "value": value,
                  "higher_is_better": bool(exec_properties["higher_is_better"])}
        run_id = self._context.pipeline_run_id if self._context else ""
        result = serving_versions.push(
            source, target, model_uri=model.uri, metric=metric, check=check,
            keep=exec_properties.get("keep_versions") or 0, run_id=run_id or "",
            data=trained_on, digest=digest,
            answers=json.loads(exec_properties.get("target") or "{}"))
        out.set_int_custom_property(PUSHED_KEY, int(result.pushed))
        out.set_string_custom_property(NOTE_KEY, result.note)
        if result.destination:
            out.set_string_custom_property(DESTINATION_KEY, result.destination)
        fileio.makedirs(out.uri)
        logging.info("Pusher: %s (%s)", result.note, result.destination)


class Pusher(base_component.BaseComponent):
    SPEC_CLASS = PusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, model: types.BaseChannel, model_blessing: types.BaseChannel,
                 examples: types.BaseChannel, evaluation: types.BaseChannel, serving_dir: str,
                 metric_name: str, higher_is_better: bool, keep_versions: int = 0,
                 gate: str = "", target: str = ""):
        super().__init__(spec=PusherSpec(
            model=model, model_blessing=model_blessing, examples=examples, evaluation=evaluation,
            serving_dir=serving_dir, keep_versions=keep_versions, metric_name=metric_name,
            higher_is_better=int(higher_is_better), gate=gate, target=target,
            pushed_model=types.Channel(type=standard_artifacts.PushedModel)))
