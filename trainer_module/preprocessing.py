"""preprocessing_fn for tf.Transform: generic over any CSV, driven by the inferred schema's types.

- numeric feature x: `x_xf` = z-score with missing filled by the mean (so 0), `x_missing` 0/1,
  and `x_q`, its place among the training values' quantiles (features.QUANTILE_BINS bins; 0 to
  QUANTILE_BINS, linear inside a bin; 0 when missing), from which the built-in model computes
  the piecewise-linear encoding of Gorishniy et al. 2022 (trainer_module/model.py); all numeric
  columns go through one [batch, n] matrix (analyzers: one per statistic, not per column), and
  for the built-in model come out as one tensor (TransformSpec.packed: features.NUMERIC_COLUMNS);
- integer feature i: as a numeric feature, and `i_code`, the index of its value among the
  column's VOCABULARY_TOP_K most frequent ones, as many as text keeps (a flight number, or a
  distance, names a route; a panel's person id names a person: a code the model embeds as it
  embeds text);
- coded float f (TransformSpec.coded: at most CODE_TOP_K values, each in many rows,
  pipeline/column_roles.py): as a numeric feature, and `f_code` as an integer's, each value
  named by its float32 bits (exact: 14.07 is one code, 14.08 another);
- string feature s: `s_xf` = vocabulary index with OOV buckets, missing mapped to its own token;
  a near-unique one (hashed): its 1,000 most frequent values, every other value in one of 1,000
  hash buckets;
  the vocabulary is tf.Transform's approximate one (a Misra-Gries sketch per column, exact while a
  column has at most VOCABULARY_TOP_K distinct values, the same file tft.vocabulary writes): its
  analyzers are combiners, packed into one Beam stage for all columns, where tft.vocabulary runs
  stages of its own per column (13 string columns: Transform's analysis 11.0 -> 8.3 s);
- timestamp column t (ISO 8601 text, a date as people write it in the column's order, or seconds
  since 1970): its parts (year, month, day, day of week, hour) as numeric features
  `t__year_xf`, ...; a cell that is missing or not a timestamp is a missing value;
- ids and constants (the spec's `excluded`): left out;
- label, by the task decided before the run (custom_config, trainer_module/settings.py):
  classification gives classes as a vocabulary index (string or integer labels; -1 when
  missing); regression gives the value as a float, standardized by the training labels' mean
  and standard deviation (NaN when missing), integer labels too; the served model answers in
  the label's own units (trainer_module/export.py).
  Rows without a label are dropped in training.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import cells, features, hooks, timestamp_parts
from trainer_module.hook_paths import PREPROCESSING_KEY
from trainer_module.settings import REGRESSION
from trainer_module.custom_config import TransformSpec

# A string column keeps at most its 200,000 most frequent values (tf.Transform's limit for the
# approximate vocabulary); past that, the rarest share the OOV bucket. Exact below it. A large
# categorical column (TransformSpec.large) keeps every value seen often enough instead.
VOCABULARY_TOP_K = features.VOCABULARY_TOP_K


def preprocessing_fn(inputs, custom_config):
    """The Transform entry point: the features, by the built-in rules or the user's own
    preprocessing_fn (TransformSpec.preprocessing_fn, trainer_module/hooks.py), and the label."""
    spec = TransformSpec.from_custom_config(custom_config)
    label = spec.label
    if label not in inputs:
        raise ValueError(f"label column '{label}' is not among the features: {sorted(inputs)}")
    columns = {k: x for k, x in inputs.items() if k != label and k not in spec.excluded}
    if spec.preprocessing_fn:
        outputs = _user_features(spec.preprocessing_fn, columns)
    else:
        outputs = builtin_features(columns, spec.timestamps, spec.timestamp_orders, spec.hashed,
                                   Vocabularies(spec.large, spec.min_count, spec.max_vocabulary),
                                   spec.coded, packed=spec.packed)
    label_out = features.transformed_name(label)
    if label_out in outputs:
        raise ValueError(f"{PREPROCESSING_KEY}: it returns '{label_out}', the label's "
                         "name: lockstep transforms the label itself")
    outputs[label_out] = _label(inputs[label], label, spec.task)
    return outputs


def _user_features(path: str, columns: dict) -> dict:
    outputs = hooks.load(PREPROCESSING_KEY, path, 1)(dict(columns))
    if not isinstance(outputs, dict) or not outputs:
        raise ValueError(f"{PREPROCESSING_KEY}: {path} returned "
                         f"{type(outputs).__name__}, not a dict of feature tensors")
    for key, value in outputs.items():
        if not isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
            raise ValueError(f"{PREPROCESSING_KEY}: {path} returned "
                             f"{type(value).__name__} for '{key}', not a tensor")
    return dict(outputs)


class Vocabularies:
    """How many values a column keeps: at most `max_vocabulary` each; a `large` one (a large
    categorical column, pipeline/column_roles.py) every value seen at least `min_count` times,
    counted exactly (tft.vocabulary's frequency threshold), its rarer values hashed into
    features.HASH_BUCKETS buckets."""

    def __init__(self, large=(), min_count: int = features.MIN_COUNT,
                 max_vocabulary: int = features.MAX_VOCABULARY):
        self.large, self.min_count, self.max_vocabulary = set(large), min_count, max_vocabulary

    def top_k(self, usual: int) -> int:
        return min(usual, self.max_vocabulary)

    def kept(self, values, vocab_filename: str):
        """A large column's values (text) as their index among the kept values, or one of the
        hash buckets."""
        return tft.compute_and_apply_vocabulary(
            values, top_k=self.max_vocabulary, frequency_threshold=self.min_count,
            num_oov_buckets=features.HASH_BUCKETS, vocab_filename=vocab_filename)


def _code_text(x):
    """[batch] text naming each cell's value, for a code's vocabulary: an integer's digits, a
    float's float32 bits (exact, and the same wherever the graph runs); a missing cell
    features.MISSING_TOKEN (a dense column has none)."""
    name = (lambda v: tf.strings.as_string(  # noqa: E731 - applied to dense and sparse values
        tf.bitcast(v, tf.int32) if v.dtype == tf.float32 else v))
    if isinstance(x, tf.SparseTensor):
        return cells.dense(tf.SparseTensor(x.indices, name(x.values), x.dense_shape),
                      features.MISSING_TOKEN)
    return name(cells.dense(x, 0))


def builtin_features(columns: dict, timestamps=(), orders: dict | None = None,
                     hashed=(), vocabularies: Vocabularies | None = None, coded=(),
                     packed: bool = False) -> dict:
    """The built-in rules over the raw columns (the module's docstring): z-scored numerics with
    missing flags, vocabulary indices for text (`hashed` ones: the most frequent values, the rest
    in hash buckets), timestamps in parts (each read in its order, `orders` {column:
    features.ORDERS}, ISO's by default), integers and the `coded` floats also as codes;
    `vocabularies`: how many values each column keeps. `packed`: the numeric columns' features
    in one tensor, features.NUMERIC_COLUMNS, for the built-in model; else three features each."""
    vocabularies = vocabularies or Vocabularies()
    outputs = {}
    plain = {k: x for k, x in columns.items() if k not in timestamps and x.dtype != tf.string}
    names, values, present = _numeric_matrix(plain)
    for key, x in columns.items():
        if key in timestamps:
            parts, seen = timestamp_parts.parts(x, (orders or {}).get(key, features.YMD))
            names += [features.timestamp_part(key, p) for p in parts]
            values.append(tf.stack(list(parts.values()), axis=1))
            present.append(tf.stack([seen] * len(parts), axis=1))
        elif x.dtype == tf.string and key in hashed:
            outputs[features.transformed_name(key)] = (
                tft.experimental.compute_and_apply_approximate_vocabulary(
                    cells.dense(x, features.MISSING_TOKEN), top_k=features.HASHED_TOP_K,
                    num_oov_buckets=features.HASH_BUCKETS,
                    vocab_filename=features.hashed_vocab_name(key)))
        elif x.dtype == tf.int64 or (x.dtype == tf.float32 and key in coded):
            # numeric (above), and a code: a value that names a thing
            text = _code_text(x)
            outputs[features.code_name(key)] = (
                vocabularies.kept(text, features.kept_codes_name(key))
                if key in vocabularies.large else
                tft.experimental.compute_and_apply_approximate_vocabulary(
                    text, top_k=vocabularies.top_k(
                        VOCABULARY_TOP_K if x.dtype == tf.int64 else features.CODE_TOP_K),
                    num_oov_buckets=features.OOV_BUCKETS,
                    vocab_filename=features.code_vocab_name(key)))
        elif x.dtype == tf.string:
            value = cells.dense(x, features.MISSING_TOKEN)
            outputs[features.transformed_name(key)] = (
                vocabularies.kept(value, features.hashed_vocab_name(key))
                if key in vocabularies.large else
                tft.experimental.compute_and_apply_approximate_vocabulary(
                    value, top_k=vocabularies.top_k(VOCABULARY_TOP_K),
                    num_oov_buckets=features.OOV_BUCKETS,
                    vocab_filename=features.vocab_name(key)))
    if names:
        outputs.update(_numeric_features(names, tf.concat(values, axis=1),
                                         tf.concat(present, axis=1), packed))
    return outputs


def _numeric_features(names: list[str], values, present, packed: bool) -> dict:
    """The numeric columns' features from their [batch, n] values (0 where missing) and present
    flags: each column's z-score, missing flag and quantile position, three features a column or
    (packed) one features.NUMERIC_COLUMNS tensor."""
    # All numeric columns as one [batch, n] matrix, and every statistic they need in one
    # tft.sum over [present, value, value^2, 1]: one analyzer, so one pass over the data
    # (tft.scale_to_z_score of the mean-filled values needs the mean first: a second pass;
    # benchmarks/scale.py measures the difference).
    present64 = tf.cast(present, tf.float64)
    wide = tf.cast(values, tf.float64) * present64
    ones = tf.ones_like(present64[:, :1])
    sums = tft.sum(tf.concat([present64, wide, wide * wide, ones], axis=1),
                   reduce_instance_dims=False)
    width = len(names)
    count, total, squares, rows = (sums[:width], sums[width:2 * width],
                                   sums[2 * width:3 * width], sums[3 * width])
    mean = total / tf.maximum(count, 1.0)
    # The missing cells take the mean, so the filled column has the present cells' mean and
    # their squared deviations spread over all rows (float64 sums: no cancellation at the
    # scale of real measurements).
    variance = tf.maximum(squares - count * mean * mean, 0.0) / tf.maximum(rows, 1.0)
    std = tf.cast(tf.sqrt(variance), tf.float32)
    mean = tf.cast(mean, tf.float32)
    centred = present * (values - mean)
    scaled = tf.where(std > 0, centred / tf.where(std > 0, std, 1.0), centred)
    position = present * _quantile_position(values, present)
    if packed:
        # In the order of the columns' safe names, each column's (position, z-score, flag):
        # the built-in model's order of the per-column features (model.numeric_groups).
        order = sorted(range(len(names)), key=lambda i: features.safe_name(names[i]))
        return {features.NUMERIC_COLUMNS: tf.gather(
            tf.stack([position, scaled, 1.0 - present], axis=2), order, axis=1)}
    outputs = {}
    for key, column, missing, place in zip(names, tf.unstack(scaled, axis=1),
                                           tf.unstack(1.0 - present, axis=1),
                                           tf.unstack(position, axis=1)):
        outputs[features.transformed_name(key)] = column
        outputs[features.missing_flag_name(key)] = missing
        outputs[features.position_name(key)] = place
    return outputs


def _quantile_position(values, present):
    """[batch, n]: each value's place among its column's quantiles, from 0 (at or below the
    first edge) to QUANTILE_BINS (at or above the last), linear between two edges, a step where
    two edges are equal (a column of few values: the step sits at the value). One tft.quantiles
    over the [batch, n] matrix, missing cells as NaN (which it ignores), in the same pass as the
    sums: no second pass over the data."""
    bins = features.QUANTILE_BINS
    edges = tft.quantiles(tf.where(present > 0, values, float("nan")), num_buckets=bins + 1,
                          epsilon=1.0 / (4 * bins), reduce_instance_dims=False)
    edges = tf.reshape(edges, [-1, bins])  # [n, bins]: bins + 1 buckets, so bins edges
    low, high = edges[:, :-1], edges[:, 1:]  # [n, bins - 1]: the bins between two edges
    width = high - low
    x = values[:, :, None]
    inside = tf.clip_by_value((x - low) / tf.where(width > 0, width, 1.0), 0.0, 1.0)
    share = tf.where(width > 0, inside, tf.cast(x >= high, tf.float32))
    below = tf.cast(x >= edges[:, :1], tf.float32)  # the first edge: a step into bin 0
    return below[:, :, 0] + tf.reduce_sum(share, axis=2)


def _numeric_matrix(columns: dict) -> tuple[list[str], list, list]:
    """([name], [values [batch, k] float32, 0 where missing], [present [batch, k] 0/1]) of numeric
    columns of at most one value per row. The sparse ones (CSV columns with missing cells) go
    through one SparseConcat and one densify, not ops per column: the graph is traced several
    times in Transform and again wherever the transform is applied, and per-column ops made the
    tracing grow with the width."""
    sparse = {k: x for k, x in columns.items() if isinstance(x, tf.SparseTensor)}
    dense = {k: x for k, x in columns.items() if k not in sparse}
    values, present = [], []
    if sparse:
        first = next(iter(sparse.values()))
        shape = tf.stack([first.dense_shape[0], tf.constant(1, tf.int64)])
        joined = tf.sparse.concat(1, [
            tf.SparseTensor(x.indices, x.values if x.dtype == tf.float32
                            else tf.cast(x.values, tf.float32), shape) for x in sparse.values()])
        width = [-1, len(sparse)]  # static: the shape of a sparse input is known only at run time
        values.append(tf.reshape(tf.sparse.to_dense(joined), width))
        present.append(tf.reshape(tf.sparse.to_dense(tf.SparseTensor(
            joined.indices, tf.ones_like(joined.values), joined.dense_shape)), width))
    if dense:
        block = tf.stack([tf.cast(cells.dense(x, 0), tf.float32) for x in dense.values()], axis=1)
        values.append(block)
        present.append(tf.ones_like(block))
    return list(sparse) + list(dense), values, present


def builtin_feature_spec(columns: dict[str, str], timestamps=(), coded=()) -> dict:
    """The transformed features `builtin_features` makes from raw columns of these kinds
    ({column: int | float | string}; `coded`: the floats also coded): their names and tf.io
    specs, without running Transform (the check of a user's model before a run,
    trainer_module/hooks.py)."""
    spec = {}
    fixed = lambda dtype: tf.io.FixedLenFeature([], dtype)  # noqa: E731 - a short name
    for column, kind in columns.items():
        names = ([features.timestamp_part(column, p) for p in features.TIMESTAMP_PARTS]
                 if column in timestamps else [column])
        for name in names:
            if kind == "string" and column not in timestamps:
                spec[features.transformed_name(name)] = fixed(tf.int64)
                continue
            spec[features.transformed_name(name)] = fixed(tf.float32)
            spec[features.missing_flag_name(name)] = fixed(tf.float32)
            spec[features.position_name(name)] = fixed(tf.float32)
        if (kind == "int" or column in coded) and column not in timestamps:
            spec[features.code_name(column)] = fixed(tf.int64)
    return spec


def _standardized(value):
    """A regression label's value less the training labels' mean, over their standard deviation
    (1 for a constant label): the model learns a number of about unit size whatever the units
    (diamonds' dollars), and the Trainer undoes it in the served signature (label_scaling in
    trainer_module/build.py). NaN (missing) stays NaN."""
    present = tf.math.is_finite(value)
    filled = tf.cast(tf.where(present, value, 0.0), tf.float64)
    sums = tft.sum(tf.stack([tf.cast(present, tf.float64), filled, filled * filled], axis=1),
                   reduce_instance_dims=False)
    count = tf.maximum(sums[0], 1.0)
    mean = sums[1] / count
    std = tf.sqrt(tf.maximum(sums[2] / count - mean * mean, 0.0))
    std = tf.where(std > 1e-12 * tf.maximum(tf.abs(mean), 1.0), std, 1.0)
    return tf.cast((tf.cast(value, tf.float64) - mean) / std, tf.float32)


def _label(y, label: str, task: str):
    """classification: class index by the vocabulary of present labels (-1 when missing);
    regression: the value as a float, standardized (NaN when missing)."""
    if task == REGRESSION:
        if y.dtype == tf.string:
            raise ValueError(f"label column '{label}' holds text: a regression needs numbers")
        return _standardized(cells.dense(cells.as_float(y), float("nan")))
    present_values = y.values if isinstance(y, tf.SparseTensor) else y
    if y.dtype != tf.string:
        present_values = tf.strings.as_string(present_values)
    dense = cells.dense(y, "" if y.dtype == tf.string else 0)
    if y.dtype != tf.string:
        dense = tf.where(cells.present(y) > 0, tf.strings.as_string(dense), "")
    # The vocabulary sees present labels only, so "missing" never becomes a class.
    vocab = tft.experimental.approximate_vocabulary(
        present_values, top_k=VOCABULARY_TOP_K, vocab_filename=features.LABEL_VOCAB)
    return tft.apply_vocabulary(dense, vocab, default_value=-1)
