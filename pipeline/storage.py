"""Can a run write where it will write? Checked in milliseconds before anything runs, so a
read-only serving dir or a full disk is one line at the start, not an error after the whole run.

Each place (the pipeline root, the serving dir) must take a file: a probe file is created and
removed in it, or in its nearest existing parent when it does not exist yet (a local path), or
in it on an object store (created there, as the run would). A local place must also have room
for what the run will write there: about ROOT_BYTES_PER_INPUT_BYTE times the input's size under
the pipeline root (records, their columnar copy, statistics, the model, ML Metadata: 3 to 3.3
times the CSV on the tables tried) plus FIXED_BYTES, and FIXED_BYTES for a model version in the
serving dir. When both are on one file system, their needs add up.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil

from components import fs
from runtime import exit_status

ROOT_BYTES_PER_INPUT_BYTE = 4
FIXED_BYTES = 64 << 20


class StorageError(ValueError):
    """A place the run writes to is read-only, missing or full: one line naming it."""

    lockstep_exit_status = exit_status.INPUT


@dataclasses.dataclass(frozen=True)
class Place:
    what: str  # "pipeline root", "serving dir": the line names it
    path: str
    needs: int  # bytes the run will write there (estimated)


def places(pipeline_root: str, serving_dir: str, input_bytes: int) -> list[Place]:
    """The run's places and what it will write in each."""
    return [Place("pipeline root", pipeline_root, ROOT_BYTES_PER_INPUT_BYTE * input_bytes
                  + FIXED_BYTES),
            Place("serving dir", serving_dir, FIXED_BYTES)]


def check(run_places: list[Place]) -> None:
    """Raises StorageError for the first place that cannot take a file or lacks room."""
    room: dict[int, tuple[int, int, list[Place]]] = {}  # device: (free, needs, places)
    for place in run_places:
        if fs.is_uri(place.path):
            _probe_remote(place)
            continue
        existing = _nearest_existing(place)
        _probe_local(place, existing)
        device = os.stat(existing).st_dev
        free = shutil.disk_usage(existing).free
        _, needs, sharing = room.get(device, (free, 0, []))
        room[device] = (free, needs + place.needs, sharing + [place])
    for free, needs, sharing in room.values():
        if needs > free:
            names = " and ".join(f"the {p.what} {p.path}" for p in sharing)
            raise StorageError(f"{names}: the run needs about {_size(needs)} there, "
                               f"{_size(free)} free (free some space, or point "
                               f"{'them' if len(sharing) > 1 else 'it'} elsewhere)")


# What running out of space looks like in the errors of the libraries a run goes through (the
# OS, SQLite under ML Metadata, TensorFlow's file system, Beam).
_OUT_OF_SPACE = re.compile(r"No space left on device|ENOSPC|database or disk is full|"
                           r"Disk quota exceeded|EDQUOT|RESOURCE_EXHAUSTED.*(space|disk)", re.I)


def out_of_space(error_text: str, run_places: list[Place],
                 remedy: str = "free some space and run again: the components that completed "
                               "are reused, the one that failed runs again") -> str:
    """The line for an error that is a full disk (its text says so, or a local place has less
    than a megabyte left): which place, how much is free, what to do. "" for another error."""
    full = [(p, shutil.disk_usage(_nearest_existing(p)).free) for p in run_places
            if not fs.is_uri(p.path)]
    full = [(p, free) for p, free in full if free < (1 << 20)]
    if not _OUT_OF_SPACE.search(error_text) and not full:
        return ""
    where = (" and ".join(f"the {p.what} {p.path} ({_size(free)} free)" for p, free in full)
             or " and ".join(f"the {p.what} {p.path}" for p in run_places))
    return f"out of disk space under {where}; {remedy}"


def _nearest_existing(place: Place) -> str:
    try:
        return fs.nearest_existing(place.path)
    except NotADirectoryError as err:
        raise StorageError(f"{place.what} {place.path}: {err}") from None


def _probe_local(place: Place, directory: str) -> None:
    try:
        fs.probe(directory)
    except OSError as err:
        where = "" if directory == os.path.abspath(place.path) else f" (at {directory})"
        raise StorageError(f"{place.what} {place.path}: cannot write there{where}: "
                           f"{err.strerror or err}") from None


def _probe_remote(place: Place) -> None:
    try:
        fs.probe(place.path)
    except Exception as err:  # noqa: BLE001  every object store has its own errors
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise StorageError(f"{place.what} {place.path}: cannot write there: {lines[-1]}") from None


def _size(count: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
