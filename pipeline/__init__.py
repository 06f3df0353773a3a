"""The lockstep pipeline: definition, config, runners and CLI."""

import trainer_module  # noqa: F401  (chooses legacy Keras before anything imports TensorFlow)
