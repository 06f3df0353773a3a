"""Whether a fork of this process can run TensorFlow (`may_fork`): none of TensorFlow's thread
pools, which do not survive a fork, may exist in it. The runner's second lane, the serving check
and the tests' fork server fork only where it says so (runtime/processes.py, `Forked`, makes the
fork). Apart from runtime because the answer reads TensorFlow's state through its wall
(trainer_module/tf_internals.py); runtime imports nothing of lockstep's."""

from __future__ import annotations

import sys

_IMPORTED_ONLY: list[bool] = []  # this process said: TensorFlow imported, none of it run


def may_fork() -> bool:
    """Whether a fork of this process can run TensorFlow: none of TensorFlow's thread pools
    (which do not survive a fork) can exist here. True where TensorFlow is not even imported (a
    `lockstep run` process before its runner's imports); or where this process, or the one it
    was forked from, said it only imported it (`tensorflow_imported_only`) and TensorFlow's eager
    context has not been made since. False elsewhere (a test's process, a notebook): an op may
    have run there, and a graph Session's leaves no mark a check could read."""
    if "tensorflow" not in sys.modules:
        return True
    if not _IMPORTED_ONLY:
        return False
    from trainer_module import tf_internals

    return not tf_internals.eager_context_made()


def tensorflow_imported_only() -> None:
    """Said by a process that has imported TensorFlow and runs none of it: a fork server that
    imports what `lockstep run` imports and forks a run for each request (tests/forked_cli.py).
    Its forks inherit the word; a fork that goes on to run an eager op (a user's loss checked
    before the run) makes TensorFlow's context, and `may_fork` is False again. Say it only where
    no graph Session runs before a fork checks `may_fork`."""
    _IMPORTED_ONLY[:] = [True]
