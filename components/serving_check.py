"""The serving smoke test a model passes before it is published: in a fresh process, load the
SavedModel and call its `serving_default` signature on a few raw tf.Examples; every output must
have one finite row per example. A crash in the loader takes down only that process.

The Evaluator starts it (`start`) on the trained model as it begins, so the check (most of it
importing TensorFlow in the new process) runs on another core beside TFMA, and records the verdict
and the model's content hash on the blessing (VERDICT_KEY, CHECKED_SHA_KEY); the Pusher then
publishes a copy whose content hash equals the checked one, and checks the copy itself (`run`)
only when the blessing has no verdict for this content (a blessing from before, or a model
changed since).

    python -m components.serving_check MODEL_DIR EXAMPLE_FILE [EXAMPLE_FILE ...]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

from trainer_module import child_env

EXAMPLES = 8
TIMEOUT_SECONDS = 300
VERDICT_KEY = "serving_check"  # on the blessing: PASSED, or why the model does not serve
CHECKED_SHA_KEY = "serving_check_sha256"  # ... and the content hash of what was checked
PASSED = "passed"


class ServingCheckFailed(RuntimeError):
    """The copy does not load or serve; the message says how."""


class Pending:
    """A check running in its own process; `wait` returns when it ends and raises
    ServingCheckFailed with its last line if it failed (or gave no answer in time)."""

    def __init__(self, model_dir: str, example_files: list[str], timeout: float = TIMEOUT_SECONDS):
        env = child_env.python_env()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.setdefault("CUDA_VISIBLE_DEVICES", "")  # a smoke test; the accelerator stays free
        self.model_dir, self._timeout = model_dir, timeout
        self._deadline = time.monotonic() + timeout
        # A file, not a pipe: a child writing more than a pipe holds while nobody reads would stall.
        self._output = tempfile.TemporaryFile(mode="w+")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "components.serving_check", model_dir, *example_files],
            stdout=self._output, stderr=subprocess.STDOUT, text=True, env=env)

    def wait(self) -> None:
        try:
            code = self._process.wait(timeout=max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.cancel()
            raise ServingCheckFailed(
                f"serving check of {self.model_dir}: no answer in {self._timeout:.0f}s") from None
        self._output.seek(0)
        lines = self._output.read().strip().splitlines() or ["no output"]
        self._output.close()
        if code != 0:
            raise ServingCheckFailed(
                f"serving check of {self.model_dir} failed (exit {code}): {lines[-1]}")

    def verdict(self) -> str:
        """PASSED, or the reason it failed."""
        try:
            self.wait()
        except ServingCheckFailed as err:
            return str(err)
        return PASSED

    def cancel(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._output.close()


def start(model_dir: str, example_files: list[str], timeout: float = TIMEOUT_SECONDS) -> Pending:
    """Starts the check of the SavedModel at model_dir and returns at once."""
    return Pending(model_dir, example_files, timeout)


def run(model_dir: str, example_files: list[str], timeout: float = TIMEOUT_SECONDS) -> None:
    """Runs the check and waits for it; raises ServingCheckFailed with its last line."""
    start(model_dir, example_files, timeout).wait()


def eval_example_files(examples) -> list[str]:
    """The files of an Examples artifact's eval split: what the check serves."""
    from tfx.dsl.io import fileio
    from tfx.types import artifact_utils

    split = artifact_utils.get_split_uri([examples], "eval")
    return sorted(fileio.glob(f"{split}/*"))


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
