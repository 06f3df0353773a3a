"""Everything the Trainer runs (ARCHITECTURE.md). The process's settings, made before
TensorFlow is imported, are runtime's (runtime/__init__.py): imported first here too, so a
process started as `python -m trainer_module.<entry>` makes them in time."""

import runtime  # noqa: F401  (legacy Keras, one OpenBLAS thread, the entries' imports uncollected)
