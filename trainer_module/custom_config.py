"""The one codec for what crosses into the Trainer and the preprocessing_fn: TFX `custom_config`
(JSON), read in another process, often another machine. It is written and read here only:

- `TrainSpec`: label, task and TrainerConfig (trainer_module/settings.py); `to_custom_config`
  writes it, `from_custom_config` reads it back and refuses unknown or mistyped keys, so a
  renamed field fails loudly instead of disappearing.
- `TransformSpec`: what preprocessing_fn needs (label, task, the columns' roles), the same way.

This module imports nothing from the pipeline or its components, and no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from trainer_module.features import MAX_VOCABULARY, MIN_COUNT, ORDERS
from trainer_module.settings import (RUN_PARAMETERS, TrainerConfig, TrainerConfigError,
                                     check_task, trainer_config_from_dict)

# The FnArgs attribute the Trainer's executor hands the TrainSpec it decoded on in
# (components/trainer.py): run_fn reads it there, not the custom_config again.
TRAIN_SPEC = "lockstep_train_spec"
LABEL_KEY, TASK_KEY, TRAINER_KEY = "label", "task", "trainer"
EXCLUDED_KEY, TIMESTAMPS_KEY, ORDERS_KEY = "excluded", "timestamps", "timestamp_orders"
HASHED_KEY = "hashed"
# The float columns whose values are also codes (pipeline/column_roles.py, coded floats).
CODED_KEY = "coded"
# Whether the numeric columns come packed in one tensor (features.NUMERIC_COLUMNS) for the
# built-in model, or as three features each (a user's trainer.model reads those).
PACKED_KEY = "packed"
# The large categorical columns, and how many times a value is seen to keep its own row, and the
# most values a column keeps (features.py: MIN_COUNT, MAX_VOCABULARY).
LARGE_KEY, MIN_COUNT_KEY, MAX_VOCABULARY_KEY = "large", "min_count", "max_vocabulary"
# The user's preprocessing_fn (a dotted path, "" for the built-in one), and a hash of the source
# of the user's hooks (trainer_module/hooks.py, fingerprint): an edit to that code changes the
# custom_config, so TFX's cache does not serve the output of the code before the edit.
PREPROCESSING_FN_KEY, CODE_KEY = "preprocessing_fn", "code_fingerprint"


def _check_keys(values: dict, known: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(values) - set(known))
    missing = sorted(set(known) - set(values))
    if unknown or missing:
        raise TrainerConfigError(
            f"{what} custom_config: " + "; ".join(
                ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing key(s) {', '.join(missing)}"] if missing else [])))


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TrainerConfigError(f"Transform custom_config: {what} must be true or false, got "
                                 f"{value!r}")
    return value


def _names(values: Any, what: str) -> tuple[str, ...]:
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise TrainerConfigError(f"Transform custom_config: {what} must be a list of column names")
    return tuple(values)


@dataclasses.dataclass(frozen=True)
class TransformSpec:
    """What preprocessing_fn reads from Transform's custom_config: the label, the task, the
    columns left out (ids, constants), the timestamp columns (parsed into parts) with the order
    each is read in when not ISO's (features.ORDERS: {column: "mdy"}), the near-unique text
    columns hashed into buckets, the large categorical columns (each value seen `min_count` times
    kept, up to `max_vocabulary`, the rest hashed; every column keeps at most max_vocabulary),
    the float columns whose values are also codes (`coded`), whether the numeric columns come
    packed for the built-in model (`packed`), and the user's own preprocessing_fn with its code's
    fingerprint."""

    label: str
    task: str
    excluded: tuple[str, ...] = ()
    timestamps: tuple[str, ...] = ()
    preprocessing_fn: str = ""
    code_fingerprint: str = ""
    timestamp_orders: dict[str, str] = dataclasses.field(default_factory=dict)
    hashed: tuple[str, ...] = ()
    large: tuple[str, ...] = ()
    min_count: int = MIN_COUNT
    max_vocabulary: int = MAX_VOCABULARY
    coded: tuple[str, ...] = ()
    packed: bool = False

    def to_custom_config(self) -> dict[str, Any]:
        return {LABEL_KEY: self.label, TASK_KEY: check_task(self.task),
                EXCLUDED_KEY: sorted(self.excluded), TIMESTAMPS_KEY: sorted(self.timestamps),
                PREPROCESSING_FN_KEY: self.preprocessing_fn, CODE_KEY: self.code_fingerprint,
                ORDERS_KEY: dict(sorted(self.timestamp_orders.items())),
                HASHED_KEY: sorted(self.hashed), LARGE_KEY: sorted(self.large),
                MIN_COUNT_KEY: self.min_count, MAX_VOCABULARY_KEY: self.max_vocabulary,
                CODED_KEY: sorted(self.coded), PACKED_KEY: self.packed}

    @classmethod
    def from_custom_config(cls, values: dict[str, Any]) -> "TransformSpec":
        _check_keys(values, (LABEL_KEY, TASK_KEY, EXCLUDED_KEY, TIMESTAMPS_KEY,
                             PREPROCESSING_FN_KEY, CODE_KEY, ORDERS_KEY, HASHED_KEY, LARGE_KEY,
                             MIN_COUNT_KEY, MAX_VOCABULARY_KEY, CODED_KEY, PACKED_KEY), "Transform")
        for key in (MIN_COUNT_KEY, MAX_VOCABULARY_KEY):
            if not isinstance(values[key], int) or isinstance(values[key], bool) or values[key] < 1:
                raise TrainerConfigError(f"Transform custom_config: {key} must be a whole "
                                         f"number of at least 1, got {values[key]!r}")
        orders = values[ORDERS_KEY]
        if not isinstance(orders, dict) or not all(
                isinstance(k, str) and v in ORDERS for k, v in orders.items()):
            raise TrainerConfigError(f"Transform custom_config: {ORDERS_KEY} must map columns to "
                                     f"one of {', '.join(ORDERS)}, got {orders!r}")
        return cls(values[LABEL_KEY], check_task(values[TASK_KEY]),
                   _names(values[EXCLUDED_KEY], EXCLUDED_KEY),
                   _names(values[TIMESTAMPS_KEY], TIMESTAMPS_KEY),
                   _text(values[PREPROCESSING_FN_KEY], PREPROCESSING_FN_KEY),
                   _text(values[CODE_KEY], CODE_KEY), dict(orders),
                   _names(values[HASHED_KEY], HASHED_KEY), _names(values[LARGE_KEY], LARGE_KEY),
                   values[MIN_COUNT_KEY], values[MAX_VOCABULARY_KEY],
                   _names(values[CODED_KEY], CODED_KEY), _flag(values[PACKED_KEY], PACKED_KEY))


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TrainerConfigError(f"custom_config: {what} must be text, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """What the Trainer reads from its custom_config: label, task, the TrainerConfig and the
    fingerprint of the user's hook code (TransformSpec)."""

    label: str
    task: str
    trainer: TrainerConfig
    code_fingerprint: str = ""

    def to_custom_config(self) -> dict[str, Any]:
        return {LABEL_KEY: self.label, TASK_KEY: check_task(self.task),
                TRAINER_KEY: dataclasses.asdict(self.trainer), CODE_KEY: self.code_fingerprint}

    @classmethod
    def from_custom_config(cls, values: dict[str, Any],
                           run_parameters: Mapping[str, Any] | None = None) -> "TrainSpec":
        """Reads it back (the Trainer's executor, once). run_parameters: the Trainer's execution
        properties (components/trainer.py), where a Kubeflow run's values for RUN_PARAMETERS are:
        those set override the config's, coerced by the config's own rule; other keys are not
        the codec's."""
        _check_keys(values, (LABEL_KEY, TASK_KEY, TRAINER_KEY, CODE_KEY), "Trainer")
        trainer = dict(values[TRAINER_KEY])
        for name in RUN_PARAMETERS:
            value = (run_parameters or {}).get(name)
            if value is not None:
                trainer[name] = value
        return cls(values[LABEL_KEY], check_task(values[TASK_KEY]),
                   trainer_config_from_dict(trainer), _text(values[CODE_KEY], CODE_KEY))
