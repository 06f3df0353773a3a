"""What lockstep does, one module per job: a `lockstep` command calls one function here and
prints what it returns; tests call the same functions in process.

  preparing       check the data and take the decisions a run or a compile is built from
  local_run       run the pipeline here (LocalDagRunner, or the compiled spec under kfp.local)
  verification    N replicas against one device, on the user's own model (`lockstep verify`)
  compiling       the Kubeflow Pipelines v2 spec
  on_kubeflow     a run and recurring runs on Kubeflow Pipelines (or Vertex AI)
  local_schedule  the local crontab entry
  planning        the training plan for slices or replica counts
  run_history     a past run read back from ML Metadata, and a run's page

No argparse and no print: a use case that must say something while it works (the data check's
lines before a long run) takes a `say` callback and calls it with each line; the rest is in what
it returns. Heavy imports (TFX, TensorFlow, kfp) happen inside the functions that need them, so
preparing a run reads the CSVs before TensorFlow loads. This package imports no submodule of its
own: a caller imports the one it needs.
"""

from __future__ import annotations

from typing import Callable

Say = Callable[[str], None]  # a use case's line, as it happens


def quiet(line: str) -> None:
    """A `say` that says nothing: what a caller passes that wants only the result."""
