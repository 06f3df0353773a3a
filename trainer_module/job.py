"""One training job: a TrainSpec (what to train: label, task, settings; trainer_module/settings.py)
and where its data, Transform output and outputs are.

`run_fn` (trainer_module/run_fn.py) makes one from TFX's FnArgs; tests, benchmarks and the
processes a job starts (the equivalence check, the parameter-server trainer) take it whole. It
crosses into such a process once, as JSON, by this module's codec (`to_json` / `from_json`),
which refuses an unknown, missing or mistyped key; its spec goes by TrainSpec's own codec.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from trainer_module.settings import TrainerConfig, TrainerConfigError
from trainer_module.custom_config import TrainSpec

_PATHS = ("transform_dir", "model_run_dir", "serving_model_dir", "base_model")
# A job's refit after early stopping (trainer_module/refit.py) is a job of its own, whose ModelRun
# directory is this one under its first fit's (trainer_module/resume.py finds and parks it).
REFIT = "lockstep_refit"


@dataclasses.dataclass(frozen=True)
class TrainJob:
    train_files: tuple[str, ...]
    eval_files: tuple[str, ...]
    transform_dir: str
    model_run_dir: str
    serving_model_dir: str
    spec: TrainSpec  # what to train, as the pipeline decided it (the task: pipeline/data_check.py)
    base_model: str = ""  # a SavedModel to warm-start from ("" for none)

    def __post_init__(self):
        object.__setattr__(self, "train_files", tuple(self.train_files))
        object.__setattr__(self, "eval_files", tuple(self.eval_files))

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def trainer(self) -> TrainerConfig:
        return self.spec.trainer

    def with_trainer(self, trainer: TrainerConfig) -> "TrainJob":
        """The same job with other training settings."""
        return dataclasses.replace(self, spec=dataclasses.replace(self.spec, trainer=trainer))

    def to_json(self) -> str:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["train_files"], values["eval_files"] = list(self.train_files), list(self.eval_files)
        values["spec"] = self.spec.to_custom_config()
        return json.dumps(values)

    @classmethod
    def from_json(cls, text: str) -> "TrainJob":
        values: dict[str, Any] = json.loads(text)
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = sorted(set(values) - fields), sorted(fields - set(values))
        if unknown or missing:
            raise TrainerConfigError("TrainJob: " + "; ".join(
                ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing key(s) {', '.join(missing)}"] if missing else [])))
        for key in ("train_files", "eval_files"):
            if not isinstance(values[key], list) or not all(isinstance(v, str)
                                                            for v in values[key]):
                raise TrainerConfigError(f"TrainJob: {key} must be a list of paths")
        for key in _PATHS:
            if not isinstance(values[key], str):
                raise TrainerConfigError(f"TrainJob: {key} must be text, got {values[key]!r}")
        if not isinstance(values["spec"], dict):
            raise TrainerConfigError(f"TrainJob: spec must be a TrainSpec, got {values['spec']!r}")
        return cls(**{**values, "spec": TrainSpec.from_custom_config(values["spec"])})
