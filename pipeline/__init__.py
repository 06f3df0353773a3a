"""The lockstep pipeline: definition, config, runners and CLI."""

import runtime  # noqa: F401  (chooses legacy Keras before anything imports TensorFlow)
import components  # noqa: F401  (defers TFX's component catalogue: components/compat/deferred.py)
