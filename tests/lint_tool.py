"""tools/private_names.py, the lint rule behind the wall (components/compat/), as a module for the
tests that use it (tools/ is not a package). Imports no TensorFlow."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load_lint():
    spec = importlib.util.spec_from_file_location("private_names",
                                                  REPO / "tools" / "private_names.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up
    spec.loader.exec_module(module)
    return module
