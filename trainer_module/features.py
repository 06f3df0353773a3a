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


POSITION_SUFFIX = "_q"


def position_name(key: str) -> str:
    """A numeric feature's place among its training values' quantiles (trainer_module/
    preprocessing.py): 0 up to QUANTILE_BINS, piecewise linear between the quantiles."""
    return f"{safe_name(key)}{POSITION_SUFFIX}"


# Every numeric column's features in one tensor, [batch, columns, 3]: each column's (position,
# z-score, missing flag), the columns in the order of their safe names (the order the built-in
# model takes them in from the per-column features). What the built-in preprocessing gives the
# built-in model (TransformSpec.packed: trainer.model unset): one tensor through the transform's
# outputs, the input pipeline and the model's inputs, not three per column (issue 72: a table of
# 200 numeric columns made 600 of each). Not a name of the per-column features: none ends so.
NUMERIC_COLUMNS = "numeric_columns"
PACKED_PARTS = 3  # position, z-score, missing flag


# The quantile bins of a numeric feature's position: 48, as in Gorishniy et al. 2022's
# piecewise-linear encoding. The model expands a position p into the encoding, bin t's share
# clip(p - t, 0, 1) (trainer_module/model.py).
QUANTILE_BINS = 48


def code_name(key: str) -> str:
    """An integer column's value as a code (a flight number, a distance that names a route):
    its index among the column's VOCABULARY_TOP_K most frequent values (a coded float's:
    CODE_TOP_K)."""
    return f"{safe_name(key)}_code"


def code_vocab_name(key: str) -> str:
    return f"codes_{safe_name(key)}"


CODE_TOP_K = 1024

# A text column keeps at most its 200,000 most frequent values, and so does an integer column's
# code (a coded float's: CODE_TOP_K) (tf.Transform's approximate vocabulary, exact below this
# many distinct values).
VOCABULARY_TOP_K = 200_000
# A large categorical column (pipeline/column_roles.py): a text or integer column with more
# distinct values than VOCABULARY_TOP_K that repeat (user or item ids). It keeps every value seen
# at least data.min_count times, up to data.max_vocabulary (exact: tft.vocabulary's frequency
# threshold), and its rare ones fall into HASH_BUCKETS buckets by a hash of their text; its
# vocabulary goes by the hashed prefix (a text column's) or this one (an integer's code), which
# tells the model its size: the kept values plus HASH_BUCKETS.
MIN_COUNT = 2
MAX_VOCABULARY = 50_000_000


def kept_codes_name(key: str) -> str:
    return f"kept_codes_{safe_name(key)}"


def vocab_name(key: str) -> str:
    return f"vocab_{safe_name(key)}"


# A near-unique text column (pipeline/column_roles.py, HASHED): its HASHED_TOP_K most frequent
# values keep an index each, every other value one of HASH_BUCKETS buckets by a hash of its text
# (in the graph, so a server hashes as training did). Its vocabulary file has its own prefix,
# which tells the model its size: HASHED_TOP_K at most, plus HASH_BUCKETS.
HASHED_TOP_K = 1000
HASH_BUCKETS = 1000


def hashed_vocab_name(key: str) -> str:
    return f"hashed_{safe_name(key)}"


# A timestamp column: every present cell an ISO 8601 date, optionally with a time of day and a
# zone, `-` or `/` between the date's fields (2013-01-01, 2013/01/01 05:15, 2013-01-01T10:00:00Z,
# 2013-01-01 10:00:00.250+02:00). Fields sit at fixed places, so a graph reads them with substr.
# One RE2 pattern: the check before the run (Arrow) and the transform graph (TensorFlow) agree.
TIMESTAMP_PATTERN = (r"^[0-9]{4}([-/])[0-9]{2}([-/])[0-9]{2}"
                     r"([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]+)?)?)?(Z|[+-][0-9]{2}:?[0-9]{2})?$")
# Dates as people write them, each column in one order the check before the run decides from its
# cells (pipeline/column_roles.py) or data.columns names ("timestamp:dmy"); the transform graph
# reads the numbers in that order (trainer_module/preprocessing.py). Each form, one RE2 pattern
# (Arrow and TensorFlow both use RE2): 1/31/2017, 31.01.17 06:00 PM, Jan 5, 2017, 5 January 2017.
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = r"(?i:" + "|".join(MONTHS) + r")[a-zA-Z]*\.?"
_TIME = r"(,?[T ]+[0-9]{1,2}:[0-9]{2}(:[0-9]{2}([.][0-9]+)?)?( ?(?i:[ap])\.?(?i:m)\.?)?)?"
DATE_FORMS = {
    "numeric": r"^[0-9]{1,2}[-/.][0-9]{1,2}[-/.]([0-9]{4}|[0-9]{2})" + _TIME + "$",
    "month_name_first": r"^" + _MONTH + r" [0-9]{1,2}(st|nd|rd|th)?,? [0-9]{4}" + _TIME + "$",
    "day_first_month_name": r"^[0-9]{1,2}[ -]" + _MONTH + r"[ ,-]+[0-9]{4}" + _TIME + "$",
}
ANY_DATE_FORM = "|".join(f"({pattern})" for pattern in DATE_FORMS.values())
# The orders a timestamp column is read in: ISO's year-month-day (TIMESTAMP_PATTERN), the other
# forms' month/day/year or day/month/year, or seconds since 1970 in a numeric column.
YMD, MDY, DMY, EPOCH = "ymd", "mdy", "dmy", "epoch"
ORDERS = (YMD, MDY, DMY, EPOCH)
# The numeric parts a model can use, each a feature of its own (z-scored, with a missing flag).
# The time is the wall-clock time written in the cell; a zone suffix is not applied.
TIMESTAMP_PARTS = ("year", "month", "day", "day_of_week", "hour")


def timestamp_part(column: str, part: str) -> str:
    """The name a timestamp column's part goes by, as if it were a numeric column."""
    return f"{column}__{part}"


# TFMA's example weight in the eval signature: 1 for an example with a label, 0 without, so an
# unlabeled example counts in no metric (as it counts in no training step).
EVAL_WEIGHT = "lockstep_label_weight"
