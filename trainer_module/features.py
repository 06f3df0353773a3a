"""Names and kinds of features, shared by preprocessing, the model, the input pipeline and export."""

from __future__ import annotations

OOV_BUCKETS = 1
MISSING_TOKEN = "__missing__"
LABEL_VOCAB = "label_vocab"


def transformed_name(key: str) -> str:
    return f"{key}_xf"


def missing_flag_name(key: str) -> str:
    return f"{key}_missing"


def vocab_name(key: str) -> str:
    return f"vocab_{key}"
