"""tf.Transform preprocessing for the credit scoring data (data/credit_data.csv).

lockstep calls `preprocessing_fn(inputs)` with the raw columns, the label (Status) left out:
{column: tensor}. Each column arrives as tf.Transform parses it from the tf.Examples; in a
lockstep run that is a SparseTensor [batch, 1] holding the present cells (its schema has no
fixed shape, so even a column without a missing cell is sparse), and the helpers below take a
dense [batch] or [batch, 1] tensor as well. It returns {feature: tensor}: lockstep adds the
label itself.

What comes out, and what the model (model.py) does with it:

- `<col>_z` (float): the numeric columns, the money amounts (long right tails) through log1p
  first, z-scored over their present cells; a missing cell gets 0, the mean: mean imputation
  in one pass over the data;
- `<col>_missing` (float 0/1): whether the cell was missing, for every numeric column (in this
  data Income, Assets and Debt have missing cells; a served request may miss any);
- `LoanToPrice_z` (float): the loan amount over the price of the good, z-scored;
- `<col>_bucket` (int): Age and Seniority in quantile buckets; BUCKETS gives their number, and
  the model reads it from there;
- `<col>_xf` (int): vocabulary indices of the categorical columns (a missing cell is the token
  "missing"), with an OOV bucket, the vocabulary named `vocab_<col>`, so
  `ModelInputs.categorical` finds them with their sizes. Time (the loan's term in months, 11
  values) is one too, and so are two crosses for the wide part, `Job_x_Home_xf` and
  `Records_x_Job_xf`.

The float features feed both the wide (linear) and the deep part; the int ones are one-hot
weights in the wide part and embeddings in the deep part.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

NUMERIC = ["Seniority", "Time", "Age", "Expenses", "Income", "Assets", "Debt", "Amount", "Price"]
SKEWED = {"Income", "Assets", "Debt", "Amount", "Price"}  # money: log1p before the z-score
CATEGORICAL = ["Home", "Marital", "Records", "Job"]
CROSSES = [("Job", "Home"), ("Records", "Job")]
BUCKETS = {"Age": 6, "Seniority": 5}  # quantile buckets: ids in [0, n)
OOV_BUCKETS = 1
MISSING = "missing"


def _dense(x, default) -> tf.Tensor:
    """[batch]: the column, its missing cells set to `default`."""
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(
            tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value=default)
    return tf.reshape(x, [-1])


def _map_values(fn, x):
    """fn over the present cells: a SparseTensor stays sparse, with the same missing cells."""
    if isinstance(x, tf.SparseTensor):
        return tf.SparseTensor(x.indices, fn(x.values), x.dense_shape)
    return fn(x)


def _missing(x) -> tf.Tensor:
    """[batch] float: 1 where the cell is missing."""
    if not isinstance(x, tf.SparseTensor):
        return tf.zeros([tf.shape(x)[0]], tf.float32)
    present = _map_values(lambda v: tf.ones_like(v, tf.float32), x)
    return 1.0 - _dense(present, 0.0)


def preprocessing_fn(inputs: dict) -> dict:
    """{column: raw tensor} -> {feature: [batch] tensor} (the module's docstring)."""
    outputs = {}
    for col in NUMERIC:
        x = _map_values(lambda v: tf.cast(v, tf.float32), inputs[col])
        outputs[f"{col}_missing"] = _missing(x)
        if col in SKEWED:
            x = _map_values(tf.math.log1p, x)
        # The mean and variance of the present cells; then 0 (the mean) where one is missing.
        outputs[f"{col}_z"] = _dense(tft.scale_to_z_score(x), 0.0)

    amount = tf.cast(_dense(inputs["Amount"], 0), tf.float32)
    price = tf.cast(_dense(inputs["Price"], 0), tf.float32)
    outputs["LoanToPrice_z"] = tft.scale_to_z_score(amount / tf.maximum(price, 1.0))

    for col, buckets in BUCKETS.items():
        values = tf.cast(_dense(inputs[col], 0), tf.float32)
        outputs[f"{col}_bucket"] = tft.bucketize(values, num_buckets=buckets)

    text = {col: _dense(inputs[col], MISSING) for col in CATEGORICAL}
    text["Time"] = tf.strings.as_string(_dense(inputs["Time"], -1))  # -1: missing
    for a, b in CROSSES:
        text[f"{a}_x_{b}"] = tf.strings.join([text[a], text[b]], separator="|")
    for name, values in text.items():
        outputs[f"{name}_xf"] = tft.compute_and_apply_vocabulary(
            values, num_oov_buckets=OOV_BUCKETS, vocab_filename=f"vocab_{name}")
    return outputs
