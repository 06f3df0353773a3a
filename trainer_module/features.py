"""Names and kinds of features, shared by preprocessing, the model, the input pipeline and export."""

from __future__ import annotations

CLASSIFICATION, REGRESSION = "classification", "regression"
OOV_BUCKETS = 1
MISSING_TOKEN = "__missing__"
LABEL_VOCAB = "label_vocab"


def transformed_name(key: str) -> str:
    return f"{key}_xf"


def missing_flag_name(key: str) -> str:
    return f"{key}_missing"


def vocab_name(key: str) -> str:
    return f"vocab_{key}"


def task_for_label_dtype(dtype) -> str:
    """String and integer labels are classes; a float label is a regression target."""
    return REGRESSION if dtype.is_floating else CLASSIFICATION
