"""A wide & deep credit-scoring model for lockstep, plugged in by dotted path:

- `wide_deep.preprocessing:preprocessing_fn`: tf.Transform features from the raw credit columns;
- `wide_deep.model:build`: the Keras model over them.

See ../README.md.
"""
