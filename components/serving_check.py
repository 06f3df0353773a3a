"""The serving smoke test a model passes before it is published: in a fresh process, load the
SavedModel and call its `serving_default` signature on a few raw tf.Examples; every output must
have one finite row per example. A crash in the loader takes down only that process.

The Evaluator starts it (`start`) on the trained model as it begins, so the check (most of it
importing TensorFlow in the new process) runs on another core beside TFMA, and records the verdict
and the model's content hash on the blessing (VERDICT_KEY, CHECKED_SHA_KEY); the Pusher then
publishes a copy whose content hash equals the checked one, and checks the copy itself (`run`)
only when the blessing has no verdict for this content (a blessing from before, or a model
changed since).

Asked for (`figures`), the same process then scores samples of the train and eval splits and
writes the model's metrics on each (components/generalization.py: the generalisation gap).

Most of the check is the new process importing TensorFlow. A runner that knows a check is coming
(the local runner, when it runs the Evaluator in the process that trains:
pipeline/local/dag_runner.py) calls `prewarm_when_training_begins`; the Trainer's executor calls
`training_begins` as its Do starts (a cached Trainer never does, and nor does a run that trains
nothing: no process is started for nothing). Then `prewarm` starts a process with
`--arguments-on-stdin` that imports TensorFlow beside the training and waits for its arguments,
and the next `start` in this process hands them to it. It is still a process that has loaded no
model but the one it checks.

Where this process may fork (trainer_module/fork_safety.may_fork: a `lockstep run` process once
its runner's imports are done, before any node runs), the runner forks the prewarmed process instead
(`prewarm_by_fork`, pipeline/orchestrators/local_dag.py): no interpreter starts and nothing is
imported again (about 3 CPU-seconds a run), and whichever check the run makes uses it (the
Evaluator's, or the Pusher's when it runs in this process), cached Trainer or not.

    python -m components.serving_check MODEL_DIR EXAMPLE_FILE [EXAMPLE_FILE ...]
        [--figures OUT.json --label-key KEY --split NAME=PATTERN ...]
    python -m components.serving_check --arguments-on-stdin   (then the above as a JSON list)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import typing

from runtime import processes

EXAMPLES = 8
TIMEOUT_SECONDS = 300
VERDICT_KEY = "serving_check"  # on the blessing: PASSED, or why the model does not serve
CHECKED_SHA_KEY = "serving_check_sha256"  # ... and the content hash of what was checked
PASSED = "passed"
ON_STDIN = "--arguments-on-stdin"
PARENT = "LOCKSTEP_CHECK_PARENT"  # the pid of the process that started the check, which it dies with


class ServingCheckFailed(RuntimeError):
    """The copy does not load or serve; the message says how."""


def _spawn(arguments: list[str]) -> tuple[subprocess.Popen, typing.IO]:
    """A check process and the file its output goes to (a file, not a pipe: a child writing more
    than a pipe holds while nobody reads would stall)."""
    env = processes.python_env()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")  # a smoke test; the accelerator stays free
    output = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen([sys.executable, "-m", "components.serving_check", *arguments],
                               stdin=subprocess.PIPE if arguments == [ON_STDIN] else None,
                               stdout=output, stderr=subprocess.STDOUT, text=True,
                               env=dict(env, **{PARENT: str(os.getpid())}))
    return process, output


_prewarmed: list[tuple[subprocess.Popen | processes.Forked, typing.IO]] = []  # at most one
# A line of TensorFlow's C++ log (a forked check logs at its parent's level): not the reason.
_NATIVE_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ")
_prewarm_when_training: list[bool] = []  # [True] while a runner asks for it


def prewarm_when_training_begins() -> None:
    """The next `training_begins` in this process prewarms a check (until `discard_prewarmed`)."""
    _prewarm_when_training[:] = [True]


def training_begins() -> None:
    """The Trainer's executor begins: prewarms a check if a runner asked for one."""
    if _prewarm_when_training:
        _prewarm_when_training.clear()
        prewarm()


def prewarm() -> None:
    """Starts a check process that imports TensorFlow now and waits for the next `start`'s
    arguments (one at a time; a process that already waits is kept)."""
    if not any(process.poll() is None for process, _ in _prewarmed):
        discard_prewarmed()
        _prewarmed.append(_spawn([ON_STDIN]))
        logging.getLogger(__name__).info("Serving check: process %d prewarmed",
                                         _prewarmed[0][0].pid)


def prewarm_by_fork() -> None:
    """The prewarmed check is this process forked, waiting for the next `start`'s arguments.
    Only where `fork_safety.may_fork()`; call it after forking any other process that must not
    hold this one (the worker lane's: its `start` would otherwise find it)."""
    discard_prewarmed()
    output = tempfile.TemporaryFile(mode="w+")
    _prewarmed.append((processes.Forked(lambda requests, answers: _forked_check(
        requests, answers, output.fileno()), text=True), output))
    logging.getLogger(__name__).info("Serving check: process %d forked, waiting for its model",
                                     _prewarmed[0][0].pid)


def _forked_check(requests: int, answers: int, output: int) -> int:
    """In the fork: what `python -m components.serving_check --arguments-on-stdin` has as it
    starts (its output to `output`, no GPU, no handler of the parent's), then the check."""
    os.close(answers)
    os.dup2(output, 1), os.dup2(output, 2)
    processes.as_a_fresh_child()
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # read as TensorFlow first runs, after this
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with os.fdopen(requests) as stream:
        line = stream.readline()
    return main(json.loads(line)) if line.strip() else 0  # nothing: discarded unused


def discard_prewarmed() -> None:
    """Ends a prewarmed process that no check used (the run is over), and forgets a
    `prewarm_when_training_begins` no training met."""
    _prewarm_when_training.clear()
    while _prewarmed:
        process, output = _prewarmed.pop()
        if process.poll() is None:
            process.kill()
            process.wait()
        output.close()


class Pending:
    """A check running in its own process; `wait` returns when it ends and raises
    ServingCheckFailed with its last line if it failed (or gave no answer in time)."""

    def __init__(self, model_dir: str, example_files: list[str], timeout: float = TIMEOUT_SECONDS,
                 figures: list[str] = ()):
        self.model_dir, self._timeout = model_dir, timeout
        self._deadline = time.monotonic() + timeout
        arguments = [model_dir, *example_files, *figures]
        warm = _prewarmed.pop() if _prewarmed else None
        if warm is not None and warm[0].poll() is None:
            self._process, self._output = warm
            self._process.stdin.write(json.dumps(arguments) + "\n")
            self._process.stdin.close()
        else:
            if warm is not None:
                warm[1].close()
            self._process, self._output = _spawn(arguments)
        logging.getLogger(__name__).info("Serving check of %s: process %d%s", model_dir,
                                         self._process.pid, " (waiting for it)" if warm else "")

    def wait(self) -> None:
        try:
            code = self._process.wait(timeout=max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.cancel()
            raise ServingCheckFailed(
                f"serving check of {self.model_dir}: no answer in {self._timeout:.0f}s") from None
        self._output.seek(0)
        lines = [line for line in self._output.read().strip().splitlines()
                 if not _NATIVE_LOG.match(line)] or ["no output"]
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


def start(model_dir: str, example_files: list[str], timeout: float = TIMEOUT_SECONDS,
          figures_to: str = "", label_key: str = "", splits: dict[str, str] | None = None
          ) -> Pending:
    """Starts the check of the SavedModel at model_dir and returns at once. figures_to: where
    to write the model's metrics on samples of `splits` ({name: file pattern}), label_key the
    transformed label's name (components/generalization.py)."""
    figures = []
    if figures_to:
        figures = ["--figures", figures_to, "--label-key", label_key,
                   *[arg for name, pattern in (splits or {}).items()
                     for arg in ("--split", f"{name}={pattern}")]]
    return Pending(model_dir, example_files, timeout, figures)


def run(model_dir: str, example_files: list[str], timeout: float = TIMEOUT_SECONDS) -> None:
    """Runs the check and waits for it; raises ServingCheckFailed with its last line."""
    start(model_dir, example_files, timeout).wait()


def eval_example_files(examples) -> list[str]:
    """The files of an Examples artifact's eval split: what the check serves."""
    from tfx.dsl.io import fileio

    return sorted(fileio.glob(split_pattern(examples, "eval")))


def split_pattern(examples, split: str) -> str:
    """The file pattern of one split of an Examples artifact."""
    from tfx.types import artifact_utils

    return f"{artifact_utils.get_split_uri([examples], split)}/*"


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
    with processes.imports_uncollected():  # at once where prewarmed: TensorFlow is in
        import numpy as np
        import tensorflow as tf

    if argv == [ON_STDIN]:  # prewarmed: TensorFlow is in; now the arguments
        line = sys.stdin.readline()
        if not line.strip():
            return 0  # discarded unused
        argv = json.loads(line)
    parser = argparse.ArgumentParser(prog="components.serving_check")
    parser.add_argument("model_dir")
    parser.add_argument("files", nargs="*")
    parser.add_argument("--figures", default="")
    parser.add_argument("--label-key", default="")
    parser.add_argument("--split", action="append", default=[])
    args = parser.parse_args(argv)
    model_dir, files = args.model_dir, args.files
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
    if args.figures:
        _write_figures(model, args.figures, args.label_key, dict(s.split("=", 1) for s in args.split))
    return 0


def _write_figures(model, path: str, label_key: str, splits: dict[str, str]) -> None:
    """The model's metrics on a sample of each split (components/generalization.py), as JSON."""
    from components import generalization
    from trainer_module import features, input_pipeline

    found = generalization.measure(
        model, {name: (input_pipeline.list_files(pattern), input_pipeline.recorded_rows([pattern]))
                for name, pattern in splits.items()},
        label_key, features.EVAL_WEIGHT)
    with open(path, "w") as out:
        json.dump(found, out)
    print("figures: " + "; ".join(f"{s} {f['rows']} rows " + ", ".join(
        f"{k} {v:.4f}" for k, v in f["metrics"].items()) for s, f in found.items()))


if __name__ == "__main__":
    # Ended by the kernel when the process that started it ends (a run killed or stopped while it
    # imports or waits), set here rather than in a preexec_fn, which a process with threads
    # running must not use; a parent already gone: nothing to check for.
    processes.die_with_parent()
    if os.environ.get(PARENT, str(os.getppid())) != str(os.getppid()):
        sys.exit(1)
    sys.exit(main(sys.argv[1:]))
