"""Custom TFX components."""

import trainer_module  # noqa: F401  (chooses legacy Keras before anything imports TensorFlow)
