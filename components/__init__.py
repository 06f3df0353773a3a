"""Custom TFX components."""

import runtime  # noqa: F401  (chooses legacy Keras before anything imports TensorFlow)
from components.compat.deferred import defer_component_catalogue

defer_component_catalogue()  # before anything under tfx.components: components/compat/deferred.py
