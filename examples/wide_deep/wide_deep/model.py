"""A wide & deep model (Cheng et al., 2016) over the features preprocessing.py makes.

- wide: a linear model (zero at the start) over every feature: a weight per id and output for
  each sparse feature (vocabulary indices, the crosses, the buckets; an Embedding(size,
  outputs) row), a weight per numeric feature and output;
- deep: the numeric features and an embedding of each sparse feature, through Dense layers
  each followed by BatchNormalization(synchronized=True) and ReLU. Synchronized: under a
  multi-replica strategy its batch statistics are those of the global batch, so N replicas make
  the update one device makes (plain BatchNormalization would use each replica's slice, which
  `trainer.verify = true` catches);
- the logits: wide + deep, [batch, inputs.outputs].

No dropout: random masks drawn per replica are another way for N replicas to differ from one
device; the L2 penalties regularize instead.

Settings come from `trainer.model_params` (`inputs.params`), each with a default:
hidden_units [32, 16], embedding_dim 4, l2 (the deep kernels; default trainer.l2), wide_l2 (the
wide weights; default l2), and bucket_sizes {feature: buckets} for the integer features that
are not vocabularies (default: preprocessing.BUCKETS). Initializers are seeded with
trainer.seed, so a run reproduces.
"""

from __future__ import annotations

import tensorflow as tf

from wide_deep import preprocessing


def _bucket_sizes(inputs, params) -> dict[str, int]:
    """{integer feature: ids}, for the int64 features that have no vocabulary."""
    sizes = {f"{col}_bucket": n for col, n in preprocessing.BUCKETS.items()}
    sizes.update({str(k): int(v) for k, v in dict(params.get("bucket_sizes", {})).items()})
    unknown = [key for key in inputs.integer if key not in sizes]
    if unknown:
        raise ValueError(f"wide_deep: no size for the integer feature(s) {unknown}: give "
                         "trainer.model_params.bucket_sizes = {feature = buckets}")
    return {key: sizes[key] for key in inputs.integer}


def build(inputs) -> tf.keras.Model:
    """inputs: lockstep's ModelInputs (trainer_module/hooks.py). Returns a model from
    {feature: [batch] tensor} to logits [batch, inputs.outputs]."""
    params = inputs.params
    hidden_units = [int(u) for u in params.get("hidden_units", [32, 16])]
    embedding_dim = int(params.get("embedding_dim", 4))
    l2 = float(params.get("l2", inputs.config.l2))
    wide_l2 = float(params.get("wide_l2", l2))
    seed = inputs.config.seed
    deep_reg = tf.keras.regularizers.l2(l2) if l2 else None
    wide_reg = tf.keras.regularizers.l2(wide_l2) if wide_l2 else None
    glorot = lambda i: tf.keras.initializers.GlorotUniform(seed=seed + i)  # noqa: E731

    # {feature: ids}: the vocabularies, OOV buckets included, and the buckets.
    sparse = {**inputs.categorical, **_bucket_sizes(inputs, params)}
    features = {key: tf.keras.Input(shape=(), name=key, dtype=tf.float32)
                for key in inputs.numeric}
    features.update({key: tf.keras.Input(shape=(), name=key, dtype=tf.int64)
                     for key in sorted(sparse)})
    numeric = (tf.keras.layers.Concatenate(name="numeric")(
        [tf.keras.layers.Reshape((1,), name=f"column_{key}")(features[key])
         for key in inputs.numeric]) if inputs.numeric else None)

    # Wide: a linear model, every weight zero at the start.
    wide_terms = [
        tf.keras.layers.Embedding(size, inputs.outputs, embeddings_initializer="zeros",
                                  embeddings_regularizer=wide_reg, name=f"wide_{key}")(features[key])
        for key, size in sorted(sparse.items())]
    if numeric is not None:
        wide_terms.append(tf.keras.layers.Dense(
            inputs.outputs, use_bias=False, kernel_initializer="zeros",
            kernel_regularizer=wide_reg, name="wide_numeric")(numeric))

    # Deep: the numerics as they are (z-scored by Transform), the sparse features embedded.
    parts = [numeric] if numeric is not None else []
    parts += [tf.keras.layers.Embedding(
        size, embedding_dim, name=f"embed_{key}",
        embeddings_initializer=tf.keras.initializers.RandomUniform(-0.05, 0.05, seed=seed + 100 + i),
    )(features[key]) for i, (key, size) in enumerate(sorted(sparse.items()))]
    x = parts[0] if len(parts) == 1 else tf.keras.layers.Concatenate(name="deep_inputs")(parts)
    for i, units in enumerate(hidden_units):
        # No bias: the BatchNormalization after it has its own (beta).
        x = tf.keras.layers.Dense(units, use_bias=False, kernel_initializer=glorot(i),
                                  kernel_regularizer=deep_reg, name=f"deep_{i}")(x)
        x = tf.keras.layers.BatchNormalization(synchronized=True, name=f"deep_{i}_bn")(x)
        x = tf.keras.layers.ReLU(name=f"deep_{i}_relu")(x)
    deep = tf.keras.layers.Dense(inputs.outputs, kernel_initializer=glorot(len(hidden_units)),
                                 kernel_regularizer=deep_reg, name="deep_logits")(x)

    logits = tf.keras.layers.Add(name="logits")([*wide_terms, deep])
    return tf.keras.Model(features, logits, name="wide_deep")
