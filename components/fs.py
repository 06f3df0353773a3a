"""One file-system seam for local paths and object stores (gs://, s3://, ...): reading the data,
pushing a model and reading a push back all go through it, so each caller is one algorithm.

Local paths get the standard library's guarantees: an atomic rename, fsync, an exclusive create
and flock. Object stores go through TFX's fileio (it loads TensorFlow, so only when a URI is
used) and have no rename and no lock: there a write goes straight to its name, and callers make
the last write the one that marks a thing complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from typing import BinaryIO, Iterator


def is_uri(path: str) -> bool:
    """An object-store URI (scheme://...), as opposed to a local path."""
    return "://" in path


def fileio():
    """TFX's fileio: local, gs:// and s3:// alike (imports TensorFlow)."""
    from tfx.dsl.io import fileio as tfx_fileio

    return tfx_fileio


def join(*parts: str) -> str:
    """Joins with "/" on every file system (os.path.join would not keep a URI's scheme)."""
    return "/".join([parts[0].rstrip("/"), *parts[1:]])


def open_binary(path: str) -> BinaryIO:
    """A file opened for reading bytes."""
    return fileio().open(path, "rb") if is_uri(path) else open(path, "rb")


def read_bytes(path: str) -> bytes:
    with open_binary(path) as handle:
        return handle.read()


def read_text(path: str) -> str:
    """A text file's content, UTF-8."""
    return read_bytes(path).decode("utf-8")


def exists(path: str) -> bool:
    return fileio().exists(path) if is_uri(path) else os.path.exists(path)


def is_dir(path: str) -> bool:
    return fileio().isdir(path) if is_uri(path) else os.path.isdir(path)


def glob(pattern: str) -> list[str]:
    """The paths that match, sorted."""
    import glob as glob_lib

    return sorted(fileio().glob(pattern) if is_uri(pattern) else glob_lib.glob(pattern))


def makedirs(path: str) -> None:
    if is_uri(path):
        fileio().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def size(path: str) -> int:
    """A file's size in bytes."""
    return fileio().stat(path).length if is_uri(path) else os.path.getsize(path)


def write_text(path: str, text: str) -> None:
    """Writes `text` durably. Local: to a temporary name, fsynced, then renamed over `path`, so a
    reader sees the old content or the new, never half; an object store writes the whole object."""
    if is_uri(path):
        with fileio().open(path, "w") as handle:
            handle.write(text)
        return
    temporary = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):  # the write failed: leave nothing half-written
            os.remove(temporary)


def nearest_existing(path: str) -> str:
    """The local directory that is `path`, or its nearest existing parent (what a run would create
    its directories in). Raises NotADirectoryError when that is a file."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise NotADirectoryError(f"{path} is a file, not a directory")
    return path


def probe(directory: str) -> None:
    """Creates a small file in `directory` and removes it (an object store: under the URI, making
    it first as a run would), so a place that cannot be written is found before anything runs.
    Raises the error the write met (OSError locally; the store's own error otherwise)."""
    name = f".lockstep-probe-{uuid.uuid4().hex[:8]}"
    if is_uri(directory):
        makedirs(directory)
        write_text(join(directory, name), "probe")
        fileio().remove(join(directory, name))
        return
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write("probe")
    os.remove(path)


def create_exclusive(path: str) -> None:
    """Creates an empty file at `path`. Raises FileExistsError when it exists (locally atomic:
    two processes never both create it; an object store checks, then writes)."""
    if is_uri(path):
        if fileio().exists(path):
            raise FileExistsError(path)
        with fileio().open(path, "w") as handle:
            handle.write("")
        return
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))


def copy_tree(source: str, destination: str) -> None:
    if not is_uri(source) and not is_uri(destination):
        shutil.copytree(source, destination)
        return
    from tfx.utils import io_utils

    io_utils.copy_dir(source, destination)


@contextlib.contextmanager
def lock(path: str) -> Iterator[None]:
    """Holds an exclusive lock on the file `path` while the block runs (flock; the kernel releases
    it if the process dies). Object stores have no lock: there the block runs unlocked."""
    if is_uri(path):
        yield
        return
    import fcntl

    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def publishing(final: str, temp_prefix: str) -> Iterator[str]:
    """Yields the directory to build `final` in. Local: a temporary directory beside it, named
    with `temp_prefix`; when the block succeeds it is fsynced and renamed to `final` (atomic: the
    directory is whole or absent); when it fails it is removed. An object store has no rename:
    the block builds `final` itself and must write its completion marker last."""
    if is_uri(final):
        yield final
        return
    parent = os.path.dirname(final.rstrip("/"))
    staging = os.path.join(parent, f"{temp_prefix}{os.path.basename(final)}-{uuid.uuid4().hex[:8]}")
    try:
        yield staging
        fsync_tree(staging)
        os.rename(staging, final)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def remove_tree(path: str, trash_dir: str) -> None:
    """Removes a directory so that it leaves its listing at once: locally it is renamed into
    `trash_dir` first (on the same file system), then deleted; an object store deletes it."""
    if is_uri(path):
        fileio().rmtree(path)
        return
    trash = os.path.join(trash_dir, f"removing-{os.path.basename(path)}-{uuid.uuid4().hex[:8]}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def sweep(directory: str, prefix: str, older_than: float = 0) -> None:
    """Removes the local entries of `directory` named `prefix...` and older than `older_than`
    seconds: what publishing() left behind when its process was killed. Object stores: nothing."""
    if is_uri(directory):
        return
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(prefix) and os.path.getmtime(path) <= time.time() - older_than:
            shutil.rmtree(path, ignore_errors=True)


def fsync_tree(path: str) -> None:
    """Flushes every file and directory under a local `path` to the disk."""
    for directory, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(directory, name), "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(directory)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
