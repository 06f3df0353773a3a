"""One training job: where its data, Transform output and outputs are, and its settings.

`run_fn` (trainer_module/run_fn.py) makes one from TFX's FnArgs; tests, benchmarks and the
processes a job starts (the equivalence check, the parameter-server trainer) take it whole. It
crosses into such a process once, as JSON, by this module's codec (`to_json` / `from_json`),
which refuses an unknown, missing or mistyped key as TrainSpec's does.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from trainer_module.settings import (CLASSIFICATION, TrainerConfig, TrainerConfigError,
                                     check_task, trainer_config_from_dict)

_PATHS = ("transform_dir", "model_run_dir", "serving_model_dir", "label", "base_model")


@dataclasses.dataclass(frozen=True)
class TrainJob:
    train_files: tuple[str, ...]
    eval_files: tuple[str, ...]
    transform_dir: str
    model_run_dir: str
    serving_model_dir: str
    label: str
    task: str = CLASSIFICATION  # decided once, before the pipeline ran (pipeline/data_check.py)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    base_model: str = ""  # a SavedModel to warm-start from ("" for none)

    def __post_init__(self):
        object.__setattr__(self, "train_files", tuple(self.train_files))
        object.__setattr__(self, "eval_files", tuple(self.eval_files))
        check_task(self.task)

    def to_json(self) -> str:
        values = dataclasses.asdict(self)
        values["train_files"], values["eval_files"] = list(self.train_files), list(self.eval_files)
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
        for key in (*_PATHS, "task"):
            if not isinstance(values[key], str):
                raise TrainerConfigError(f"TrainJob: {key} must be text, got {values[key]!r}")
        return cls(**{**values, "trainer": trainer_config_from_dict(values["trainer"])})
