"""The lockstep pipeline: definition, config, runners and CLI. Legacy Keras is forced here, first."""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
