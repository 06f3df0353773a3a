"""Names and kinds of features, shared by preprocessing, the model, the input pipeline and export.

Raw features keep their CSV column names (a served tf.Example carries them). Everything derived
from a column, the transformed feature, its missing flag, its vocabulary file, the Keras input,
is named after `safe_name(column)`: ASCII letters, digits and `_`, starting with a letter or a
digit, which TensorFlow takes as a scope name and any filesystem as a file name. Two columns
with one safe name would share them: `collisions` finds them, and the pre-run check refuses them.
"""

from __future__ import annotations

import re

OOV_BUCKETS = 1
MISSING_TOKEN = "__missing__"
LABEL_VOCAB = "label_vocab"


def safe_name(column: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", column)
    return name if name[:1].isalnum() else f"f{name}"


def collisions(columns) -> list[tuple[str, str]]:
    """Pairs of columns that would share a safe name, in column order."""
    first: dict[str, str] = {}
    found = []
    for column in columns:
        name = safe_name(column)
        if name in first:
            found.append((first[name], column))
        else:
            first[name] = column
    return found


def transformed_name(key: str) -> str:
    return f"{safe_name(key)}_xf"


def missing_flag_name(key: str) -> str:
    return f"{safe_name(key)}_missing"


def vocab_name(key: str) -> str:
    return f"vocab_{safe_name(key)}"
