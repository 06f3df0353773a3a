"""The process's runtime, below everything else: what each process of lockstep is (its child
processes' environment, free ports, a fork seen as a Popen: `processes`), how it stops (SIGTERM
-> checkpoint -> status 5 while training, `termination`; the statuses, `exit_status`; the line of
an error a one-line report gives, `error_line`) and what
it reports as it trains (`progress`). It imports nothing of lockstep's.

Two settings are made here, the one place each is set, before anything imports TensorFlow or
numpy: `pipeline`, `components` and `trainer_module` import this package first, so every process
of lockstep (the CLI, each Kubeflow task, each Beam worker, the processes they start) makes them
in time.

- Legacy Keras (tf_keras): Keras 3 custom loops under tf.distribute had silent gradient-sum bugs.
- One OpenBLAS thread (where the environment names no other count): numpy's OpenBLAS starts a
  thread per core as numpy loads, and after each of its calls those threads spin on sched_yield
  waiting for the next. Nothing lockstep runs does BLAS work in numpy (TensorFlow has its own
  kernels, scikit-learn's gradient boosting OpenMP), so they only spun: 1.0 CPU-s of a
  `lockstep run` on the bundled data, 18.7 -> 17.7 CPU-s, all of it system time.

And a process started as one of the ENTRIES (`python -m trainer_module.verify_process`, the
check `trainer.verify` and `lockstep verify` start; `.parameter_server`, a parameter-server task;
`.train`, a training worker) makes its imports with the cycle collector off: each entry, as
`__main__`, calls `processes.entry_imports_done()` once they are made, which freezes what they
made and turns the collector on (runtime/processes.py, `imports_uncollected`, says why: 3.2 ->
2.3 CPU-s for these imports).
"""

import gc
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ENTRIES = ("trainer_module.verify_process", "trainer_module.parameter_server",
           "trainer_module.train")


def _main_module() -> str:
    """The module this process runs as `python -m MODULE`, while this package imports for it
    (sys.argv[0] is "-m" until then); "" otherwise."""
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] != ["-m"] or "-m" not in argv[:-1]:
        return ""
    return argv[argv.index("-m") + 1]


IMPORTS_UNCOLLECTED = _main_module() in ENTRIES and gc.isenabled()
if IMPORTS_UNCOLLECTED:
    gc.disable()
