"""The serving smoke test a push runs before it publishes a version: in a fresh process, load the
copied SavedModel and call its `serving_default` signature on a few raw tf.Examples; every
output must have one finite row per example. A crash in the loader takes down only this process.

    python -m components.serving_check MODEL_DIR EXAMPLE_FILE [EXAMPLE_FILE ...]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = 8
TIMEOUT_SECONDS = 300


class ServingCheckFailed(RuntimeError):
    """The copy does not load or serve; the message says how."""


def run(model_dir: str, example_files: list[str], timeout: float = TIMEOUT_SECONDS) -> None:
    """Runs the check in a subprocess; raises ServingCheckFailed with its last line."""
    repo = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")  # a smoke test; the accelerator stays free
    try:
        result = subprocess.run(
            [sys.executable, "-m", "components.serving_check", model_dir, *example_files],
            capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ServingCheckFailed(f"serving check of {model_dir}: no answer in {timeout:.0f}s") from None
    if result.returncode != 0:
        lines = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
        raise ServingCheckFailed(f"serving check of {model_dir} failed (exit {result.returncode}): "
                                 f"{lines[-1]}")


def _examples(files: list[str]) -> list[bytes]:
    import tensorflow as tf

    found = []
    for path in files:
        compression = "GZIP" if path.endswith(".gz") else ""
        for record in tf.data.TFRecordDataset(path, compression_type=compression).take(EXAMPLES):
            found.append(record.numpy())
        if len(found) >= EXAMPLES:
            break
    return found[:EXAMPLES]


def main(argv: list[str]) -> int:
    import numpy as np
    import tensorflow as tf

    model_dir, files = argv[0], argv[1:]
    examples = _examples(files)
    if not examples:
        print(f"no examples to serve in {', '.join(files) or '(no files)'}", file=sys.stderr)
        return 1
    model = tf.saved_model.load(model_dir)
    if "serving_default" not in model.signatures:
        print(f"{model_dir} has no serving_default signature", file=sys.stderr)
        return 1
    outputs = model.signatures["serving_default"](examples=tf.constant(examples))
    for name, value in outputs.items():
        value = value.numpy()
        if value.shape[:1] != (len(examples),):
            print(f"output {name}: {value.shape[0] if value.shape else 'no'} rows for "
                  f"{len(examples)} examples", file=sys.stderr)
            return 1
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            print(f"output {name} is not finite", file=sys.stderr)
            return 1
    print(f"served {len(examples)} examples: {', '.join(sorted(outputs))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
