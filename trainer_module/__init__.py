"""Everything the Trainer runs.

Two settings are made here, the one place each is set, before anything imports TensorFlow or
numpy: `pipeline` and `components` import this package first, so every process of lockstep (the
CLI, each Kubeflow task, each Beam worker, the processes they start) makes them in time.

- Legacy Keras (tf_keras): Keras 3 custom loops under tf.distribute had silent gradient-sum bugs.
- One OpenBLAS thread (where the environment names no other count): numpy's OpenBLAS starts a
  thread per core as numpy loads, and after each of its calls those threads spin on sched_yield
  waiting for the next. Nothing lockstep runs does BLAS work in numpy (TensorFlow has its own
  kernels, scikit-learn's gradient boosting OpenMP), so they only spun: 1.0 CPU-s of a
  `lockstep run` on the bundled data, 18.7 -> 17.7 CPU-s, all of it system time.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
