"""The user's own code, plugged in by dotted path (no `module_file`, no wheel upload):

- `trainer.model = "package.module:function"`: `function(inputs: ModelInputs) -> tf.keras.Model`.
  The model is called with a dict of the transformed features ({key: [batch] tensor}, the label
  left out) and returns [batch, inputs.outputs]: logits for classification, the value for a
  regression. Default: the built-in MLP (trainer_module/model.py).
- `trainer.loss = "package.module:name"`: a function `(labels, outputs) -> [batch]` per-example
  losses, or a `tf.keras.losses.Loss` with `reduction=NONE`. lockstep divides their sum by the
  *global* batch (trainer_module/loop.py); a loss that averages over its batch itself averages
  over one replica's batch, which is wrong by the number of replicas. Default: cross-entropy on
  logits, or the squared error.
- `transform.preprocessing_fn = "package.module:function"`: `function(inputs) -> {key: tensor}`,
  tf.Transform code over the raw columns (the label and the columns the run leaves out, ids and
  constants, are not among them); lockstep adds the label itself (trainer_module/preprocessing.py).

A hook is checked when the config is checked, before anything runs: its form
(trainer_module/hook_paths.py, no import), `load` (the import and the signature), `check_loss` and
`check_model` (what it
returns, on a small batch); each error is one line naming the key and the reason.

The hook's code travels by name: it must be importable in every process that runs a task (the
config file's directory is added to the path locally; in the image, `make image
USER_CODE=dir` puts `dir` on its PYTHONPATH). `fingerprint` hashes its package's source, so an edit
to the user's code misses TFX's cache even though the dotted path is the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from trainer_module import features
from trainer_module.hook_paths import LOSS_KEY, MODEL_KEY, HookError, check_path, split
from trainer_module.settings import REGRESSION, TrainerConfig


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """What a model hook receives: the transformed features and what the model must output."""

    feature_spec: Mapping[str, Any]  # the transformed features' tf.io specs, the label left out
    # {vocabulary name: size}, for every vocabulary the preprocessing_fn made (tft vocabularies),
    # OOV buckets not included.
    vocabulary_sizes: Mapping[str, int]
    task: str  # classification | regression
    outputs: int  # classes (the model returns logits), or 1 for a regression
    config: TrainerConfig  # the run's trainer settings (seed, hidden_units, ...)

    @property
    def params(self) -> Mapping[str, Any]:
        """trainer.model_params: the user's own settings for their model, as the config gives them."""
        return self.config.model_params

    @property
    def numeric(self) -> list[str]:
        """The float features, sorted (the packed numeric columns apart: `packed_columns`)."""
        return sorted(k for k, s in self.feature_spec.items()
                      if s.dtype.is_floating and k != features.NUMERIC_COLUMNS)

    @property
    def packed_columns(self) -> int:
        """The numeric columns packed in features.NUMERIC_COLUMNS ([columns, 3] a row), or 0."""
        spec = self.feature_spec.get(features.NUMERIC_COLUMNS)
        return int(spec.shape[0]) if spec is not None else 0

    @property
    def categorical(self) -> dict[str, int]:
        """{int64 feature: vocabulary size including its OOV buckets}, for the features named as
        the built-in preprocessing names them (`<column>_xf` with vocabulary `vocab_<column>`,
        `<column>_code` with `codes_<column>`, trainer_module/features.py)."""
        found = {}
        for key, spec in sorted(self.feature_spec.items()):
            if key.endswith("_code") and spec.dtype.is_integer:
                codes = features.code_vocab_name(key[: -len("_code")])
                kept = features.kept_codes_name(key[: -len("_code")])
                if codes in self.vocabulary_sizes:
                    found[key] = self.vocabulary_sizes[codes] + features.OOV_BUCKETS
                elif kept in self.vocabulary_sizes:  # a large integer column's
                    found[key] = self.vocabulary_sizes[kept] + features.HASH_BUCKETS
                continue
            column = key[: -len("_xf")] if key.endswith("_xf") else None
            vocab = features.vocab_name(column) if column else None
            hashed = features.hashed_vocab_name(column) if column else None
            if spec.dtype.is_integer and vocab in self.vocabulary_sizes:
                found[key] = self.vocabulary_sizes[vocab] + features.OOV_BUCKETS
            elif spec.dtype.is_integer and hashed in self.vocabulary_sizes:
                found[key] = self.vocabulary_sizes[hashed] + features.HASH_BUCKETS
        return found

    @property
    def integer(self) -> list[str]:
        """The int64 features that are not `categorical` (bucket ids and the like), sorted."""
        return sorted(k for k, s in self.feature_spec.items()
                      if s.dtype.is_integer and k not in self.categorical)


def add_code_path(directory: str | os.PathLike) -> None:
    """Makes `directory` importable here and in the processes started from here (PYTHONPATH)."""
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if directory not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([directory, *parts])


def load(key: str, path: str, arguments: int) -> Callable:
    """The object at `path`, imported, and callable with `arguments` positional arguments."""
    check_path(key, path)
    module_name, name = split(path)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the user's to see, in one line
        raise HookError(f"{key}: cannot import {module_name!r} ({type(err).__name__}: "
                        f"{_first_line(err)}; sys.path starts "
                        f"{sys.path[:3]})") from None
    try:
        hook = getattr(module, name)
    except AttributeError:
        raise HookError(f"{key}: module {module_name!r} ({getattr(module, '__file__', '?')}) "
                        f"has no {name!r}") from None
    if not callable(hook):
        raise HookError(f"{key}: {path} is a {type(hook).__name__}, not a function")
    if not _is_keras_loss(hook):
        try:
            inspect.signature(hook).bind(*range(arguments))
        except TypeError as err:
            raise HookError(f"{key}: {path}{inspect.signature(hook)} cannot be called with "
                            f"{arguments} argument(s) ({err})") from None
        except ValueError:  # a builtin without a signature: let the call tell
            pass
    return hook


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else ""


def _is_keras_loss(obj) -> bool:
    loss_class = getattr(sys.modules.get("tf_keras"), "losses", None)
    return loss_class is not None and isinstance(obj, loss_class.Loss)


def fingerprint(*paths: str) -> str:
    """A hash of the source of the top-level packages the hooks live in ("" when none): the
    bytes of every .py file under each, so any edit changes it."""
    digest = hashlib.sha256()
    roots = set()
    for path in filter(None, paths):
        top = split(path)[0].split(".")[0]
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.origin:
            continue
        origin = Path(spec.origin)
        roots.add(origin.parent if origin.name == "__init__.py" else origin)
    if not roots:
        return ""
    for root in sorted(roots):
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for file in files:
            digest.update(str(file.relative_to(root.parent)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


# --- The Trainer's side (these import TensorFlow) ------------------------------------------


def check_loss(loss, task: str, outputs: int, batch: int = 4) -> None:
    """One line naming trainer.loss when it does not give one loss per example."""
    import tensorflow as tf

    if _is_keras_loss(loss) and loss.reduction != tf.keras.losses.Reduction.NONE:
        raise HookError(f"{LOSS_KEY}: the Keras loss has reduction {loss.reduction!r}; give "
                        "reduction=NONE, lockstep divides by the global batch itself")
    labels = (tf.zeros([batch], tf.float32) if task == REGRESSION
              else tf.zeros([batch], tf.int64))
    try:
        values = tf.convert_to_tensor(loss(labels, tf.zeros([batch, outputs])))
    except Exception as err:  # noqa: BLE001 - the user's code: any error, as one line
        raise HookError(f"{LOSS_KEY}: calling it on labels [{batch}] and outputs "
                        f"[{batch}, {outputs}] failed: {type(err).__name__}: "
                        f"{_first_line(err)}") from None
    if values.shape != (batch,):
        raise HookError(f"{LOSS_KEY}: gives shape {values.shape.as_list()} for a batch of "
                        f"{batch}; it must give one loss per example, shape [{batch}] (reduction "
                        "NONE: lockstep divides their sum by the global batch)")


def check_model(model, inputs: ModelInputs, batch: int = 2) -> None:
    """One line naming trainer.model when it is not a Keras model that maps a batch of the
    transformed features to [batch, outputs]."""
    import tensorflow as tf

    if not isinstance(model, tf.keras.Model):
        raise HookError(f"{MODEL_KEY}: {inputs.config.model} returned a "
                        f"{type(model).__module__}.{type(model).__name__}, not a tf.keras.Model "
                        "(tf_keras: lockstep runs legacy Keras)")
    features = {key: tf.zeros([batch], spec.dtype) for key, spec in inputs.feature_spec.items()}
    try:
        outputs = model(features, training=False)
    except Exception as err:  # noqa: BLE001 - the user's code: any error, as one line
        raise HookError(f"{MODEL_KEY}: the model fails on a batch of the transformed features "
                        f"({', '.join(sorted(features))}): {type(err).__name__}: "
                        f"{_first_line(err)}") from None
    shape = getattr(outputs, "shape", None)
    if shape is None or shape.as_list() != [batch, inputs.outputs]:
        got = shape.as_list() if shape is not None else type(outputs).__name__
        what = "logits, one per class" if inputs.task != REGRESSION else "the predicted value"
        raise HookError(f"{MODEL_KEY}: the model returns {got} for a batch of {batch}; it must "
                        f"return [{batch}, {inputs.outputs}] ({what})")
