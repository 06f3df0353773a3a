"""ExampleGen's settings (components/csv_example_gen.py): `ExampleGenSpec` and its codec, TFX's
custom_config proto of a JSON struct, which refuses an unknown, missing or mistyped key, as
TrainSpec and TransformSpec do (trainer_module/custom_config.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from google.protobuf import any_pb2, json_format, struct_pb2
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs

from components import csv_format, row_split, spans


class ExampleGenConfigError(ValueError):
    """ExampleGen's custom_config cannot be read: the message names the key."""


_SPEC_KEYS = ("label", "missing_values", "span_pattern", "span_window", "span_marker",
              "split_by", "split_seed")


@dataclasses.dataclass(frozen=True)
class ExampleGenSpec:
    """What the executor and the driver read from ExampleGen's custom_config: the label column,
    the cells that mean missing, the span settings (components/spans.py) and the split's group
    columns and seed (components/row_split.py). The codec refuses an unknown, missing or mistyped
    key, as TrainSpec and TransformSpec do."""

    label: str
    missing_values: tuple[str, ...] = csv_format.DEFAULT_MISSING_VALUES
    span_pattern: str = ""
    span_window: int = 1
    span_marker: str = spans.DEFAULT_MARKER
    split_by: tuple[str, ...] = ()
    split_seed: int = 0

    def split_rule(self, buckets: tuple[int, ...]) -> row_split.SplitRule:
        return row_split.SplitRule(tuple(buckets), self.split_by, self.split_seed)

    def to_custom_config(self) -> example_gen_pb2.CustomConfig:
        struct = struct_pb2.Struct()
        struct.update({"label": self.label, "missing_values": list(self.missing_values),
                       "span_pattern": self.span_pattern, "span_window": self.span_window,
                       "span_marker": self.span_marker, "split_by": list(self.split_by),
                       "split_seed": self.split_seed})
        packed = any_pb2.Any()
        packed.Pack(struct)
        return example_gen_pb2.CustomConfig(custom_config=packed)

    @classmethod
    def from_exec_properties(cls, exec_properties: dict[str, Any]) -> "ExampleGenSpec":
        raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
        if not raw:
            raise ExampleGenConfigError("ExampleGen custom_config: missing (it names the label)")
        config = example_gen_pb2.CustomConfig()
        json_format.Parse(raw, config)
        struct = struct_pb2.Struct()
        config.custom_config.Unpack(struct)
        return cls.from_dict(json_format.MessageToDict(struct))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ExampleGenSpec":
        unknown = sorted(set(values) - set(_SPEC_KEYS))
        missing = sorted(set(_SPEC_KEYS) - set(values))
        if unknown or missing:
            raise ExampleGenConfigError("ExampleGen custom_config: " + "; ".join(
                ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing key(s) {', '.join(missing)}"] if missing else [])))
        tokens = values["missing_values"]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: missing_values must be a list of text, got {tokens!r}")
        window = values["span_window"]
        if isinstance(window, bool) or not isinstance(window, (int, float)) \
                or window != int(window) or window < 1:
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: span_window must be a whole number >= 1, got {window!r}")
        for key in ("label", "span_pattern", "span_marker"):
            if not isinstance(values[key], str):
                raise ExampleGenConfigError(
                    f"ExampleGen custom_config: {key} must be text, got {values[key]!r}")
        by, seed = values["split_by"], values["split_seed"]
        if not isinstance(by, list) or not all(isinstance(c, str) for c in by):
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: split_by must be a list of column names, got {by!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, float)) or seed != int(seed):
            raise ExampleGenConfigError(
                f"ExampleGen custom_config: split_seed must be a whole number, got {seed!r}")
        try:
            row_split.check_keys(by, values["label"])
        except row_split.SplitKeyError as err:
            raise ExampleGenConfigError(f"ExampleGen custom_config: {err}") from None
        return cls(values["label"], tuple(tokens), values["span_pattern"], int(window),
                   values["span_marker"], tuple(by), int(seed))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "missing_values": list(self.missing_values),
                "split_by": list(self.split_by)}

    def select_spans(self, input_base: str) -> tuple[list[int], list[str]]:
        """The spans, and their files, that the span settings select."""
        return spans.select(input_base, self.span_pattern, self.span_window,
                            marker=self.span_marker)
