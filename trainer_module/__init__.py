"""Everything the Trainer runs. Legacy Keras is forced here, before any TensorFlow import."""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
