"""Compiling for Kubeflow without loading TensorFlow, Beam, TFT, TFDV or TFMA's runtime.

Compiling needs the TFX component classes (their specs and the *names* of their executor
classes), TFX's protos and TFMA's EvalConfig proto. But importing a component class imports its
executor, and the executors import TensorFlow, Beam, TFDV, TFT and TFMA: about 15 of the 17
seconds a compile takes, for code that never runs while compiling. So `lockstep compile` first
puts stand-ins for those packages in `sys.modules`' way (a meta path finder):

- a stand-in module answers any attribute with a stand-in class; a stand-in class answers any
  attribute, call, subscript or subclassing with another stand-in class, and as a decorator
  returns the function or class it decorates unchanged (so module-level code of the executors
  runs through without doing anything);
- TFMA's protos stay real: `tensorflow_model_analysis.EvalConfig` and friends, and the `sdk`
  alias TFX imports, resolve to `tensorflow_model_analysis.proto.config_pb2`;
- TFX's file I/O is set up with its local filesystem only (TensorFlow's gfile plugin would be a
  stand-in), which is all a compile reads.

Compiled this way, the spec is byte-identical to one compiled with the real packages
(tests/test_kubeflow_compile.py compares them for several configs), and if anything fails with
the stand-ins, `lockstep compile` compiles again in a fresh process with the real imports.
Only for processes that compile and exit: never install it where a pipeline runs.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
import types

DISABLE_ENV = "LOCKSTEP_REAL_IMPORTS"
STUBBED = ("tensorflow", "apache_beam", "tensorflow_transform", "tensorflow_data_validation",
           "tfx_bsl", "keras", "tf_keras", "keras_tuner", "tensorflow_hub", "tensorflow_serving",
           "tensorflow_model_analysis")
KEPT_REAL = ("tensorflow_model_analysis.proto",)
_TFMA = "tensorflow_model_analysis"
_DISTRIBUTIONS = {"tensorflow": "tensorflow", "apache_beam": "apache-beam",
                  "tensorflow_transform": "tensorflow-transform",
                  "tensorflow_data_validation": "tensorflow-data-validation",
                  "tfx_bsl": "tfx-bsl", "tensorflow_model_analysis": "tensorflow-model-analysis"}


class _StandIn(type):
    """A class that stands for anything."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        # A decorator applied to a function or class defined in the caller's module: keep it.
        target = args[0] if len(args) == 1 and not kwargs else None
        if (isinstance(target, (types.FunctionType, type)) and not isinstance(target, _StandIn)
                and getattr(target, "__module__", None)
                == sys._getframe(1).f_globals.get("__name__")):
            return target
        return _stand_in(f"{cls.__name__}()")

    def __getitem__(cls, item):
        return _stand_in(f"{cls.__name__}[]")

    def __iter__(cls):
        return iter(())

    def __or__(cls, other):  # `pcoll | transform`, `a >> b`
        return cls

    __ror__ = __rshift__ = __rrshift__ = __or__


def _stand_in(name: str) -> type:
    return _StandIn(name, (), {})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if self.__name__ == _TFMA:
            if name == "sdk":
                return self
            config_pb2 = importlib.import_module(f"{_TFMA}.proto.config_pb2")
            if hasattr(config_pb2, name):
                return getattr(config_pb2, name)
        return _stand_in(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(KEPT_REAL) or fullname.split(".")[0] not in STUBBED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        if spec.name == _TFMA:  # its real proto subpackage must be findable
            real = importlib.machinery.PathFinder.find_spec(_TFMA)
            module.__path__ = list(real.submodule_search_locations) if real else []
        if spec.name in _DISTRIBUTIONS:
            try:
                module.__version__ = importlib.metadata.version(_DISTRIBUTIONS[spec.name])
            except importlib.metadata.PackageNotFoundError:
                module.__version__ = "0.0.0"
        return module

    def exec_module(self, module):
        pass


def install() -> bool:
    """Puts the stand-ins in place; False (and nothing done) when disabled by
    $LOCKSTEP_REAL_IMPORTS or when a stubbed package is already loaded."""
    if os.environ.get(DISABLE_ENV) or any(name in sys.modules for name in STUBBED):
        return False
    sys.modules["tensorflow"] = None  # TFX's fileio then registers its local filesystem only
    try:
        import tfx.dsl.io.plugins.tensorflow_gfile  # noqa: F401 - registers the local filesystem
    finally:
        del sys.modules["tensorflow"]
    sys.meta_path.insert(0, _Finder())
    return True
