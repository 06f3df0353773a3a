"""The serving directory: numbered model versions a model server watches, written so that it never
sees a half-written one, and a ledger of what was pushed, so that nothing is pushed twice.

    serving/1763800000/               a version: a SavedModel, and PUSH_RECORD written last
    serving/.lockstep/pushed/<sha256>.json   one per model content ever pushed, kept for good
    serving/.lockstep/versions/<N>     version numbers claimed (exclusive create), kept for good
    serving/.lockstep/lock             held while pushing (flock; local disks)
    serving/.push-<N>-<random>/        a copy in progress (not a number: servers skip it)

A push on a local disk copies the model to a temporary name beside the versions, fsyncs it,
checks that the copy loads and serves (`check`), writes its record and renames it to its number:
a rename is atomic, so a version is whole or absent. Object stores have no rename: there the
copy goes straight to its number and the record is written last; readers here require the record
(`is_complete`), on every filesystem.

Version numbers are seconds since the epoch (TFX's convention), raised to one more than any
number ever claimed, and claimed by exclusive create, so they strictly increase and never collide,
even when an operator removed the newest. A model whose content was pushed once is never pushed
again, also after its version was removed: a rollback stays rolled back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import shutil
import time
import uuid
from typing import Callable

PUSH_RECORD = "lockstep-push.json"
SAVED_MODEL = "saved_model.pb"
LEDGER = ".lockstep"
TEMP_PREFIX = ".push-"


def is_uri(path: str) -> bool:
    return "://" in path


def _fileio():
    from tfx.dsl.io import fileio  # local, gs:// and s3:// alike (imports TensorFlow)

    return fileio


@dataclasses.dataclass(frozen=True)
class Version:
    number: int
    path: str
    record: dict


@dataclasses.dataclass(frozen=True)
class PushResult:
    pushed: bool
    destination: str | None  # the new version, or the version this content went to before
    note: str  # one line for the summary


def _join(*parts: str) -> str:
    return "/".join([parts[0].rstrip("/"), *parts[1:]])


def _read_record(version_dir: str) -> dict | None:
    fileio = _fileio()
    path = _join(version_dir, PUSH_RECORD)
    try:
        if not fileio.exists(path):
            return None
        with fileio.open(path, "r") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def _parses(version_dir: str) -> bool:
    """saved_model.pb is a whole SavedModel proto (a truncated copy fails to parse)."""
    from tensorflow.core.protobuf import saved_model_pb2

    fileio = _fileio()
    try:
        with fileio.open(_join(version_dir, SAVED_MODEL), "rb") as handle:
            saved_model_pb2.SavedModel.FromString(handle.read())
        return True
    except Exception:  # noqa: BLE001  missing, unreadable or truncated: not a model
        return False


def is_complete(version_dir: str) -> bool:
    """A version a reader may use: its push record (written last) and a SavedModel that parses."""
    return _read_record(version_dir) is not None and _parses(version_dir)


def versions(serving_dir: str, complete_only: bool = True, newest: int = 0) -> list[Version]:
    """The numbered versions, oldest first; with complete_only, those a reader may use; with
    newest, only the newest that many (looked at newest first: a serving dir with hundreds of
    versions on an object store costs a read per version looked at)."""
    fileio = _fileio()
    if not serving_dir or not fileio.exists(serving_dir):
        return []
    numbers = sorted((int(n.rstrip("/")) for n in fileio.listdir(serving_dir)
                      if n.rstrip("/").isdigit()), reverse=True)
    found = []
    for number in numbers:
        path = _join(serving_dir, str(number))
        record = _read_record(path)
        if complete_only and (record is None or not _parses(path)):
            continue
        found.append(Version(number, path, record or {}))
        if newest and len(found) == newest:
            break
    return found[::-1]


def serving_version(serving_dir: str) -> Version | None:
    """The newest complete version: the one a model server (TF Serving's latest-version policy)
    serves, whatever eval metric any version recorded at push, since each was measured on its own
    eval data. None when nothing was pushed."""
    found = versions(serving_dir, newest=1)
    return found[0] if found else None


def content_hash(model_dir: str) -> str:
    """sha256 over the SavedModel's files: relative paths and bytes, in a fixed order."""
    fileio = _fileio()
    digest = hashlib.sha256()
    root = model_dir.rstrip("/")
    for directory, _, files in sorted(fileio.walk(root)):
        for name in sorted(files):
            path = _join(directory.rstrip("/"), name)
            if name == PUSH_RECORD and directory.rstrip("/") == root:
                continue
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with fileio.open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def _fsync_tree(path: str) -> None:
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


@contextlib.contextmanager
def _push_lock(serving_dir: str):
    """One push at a time into a local serving dir (released by the kernel if killed)."""
    if is_uri(serving_dir):
        yield
        return
    import fcntl

    with open(os.path.join(serving_dir, LEDGER, "lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _claim_version(serving_dir: str) -> int:
    """The next version number: at least now, above every number ever claimed; exclusive."""
    fileio = _fileio()
    claims = _join(serving_dir, LEDGER, "versions")
    fileio.makedirs(claims)
    taken = [int(n.rstrip("/")) for n in fileio.listdir(claims) if n.rstrip("/").isdigit()]
    taken += [int(n.rstrip("/")) for n in fileio.listdir(serving_dir) if n.rstrip("/").isdigit()]
    number = max([int(time.time())] + [n + 1 for n in taken])
    while True:
        try:
            if is_uri(serving_dir):  # object stores: no exclusive create through fileio
                if fileio.exists(_join(claims, str(number))):
                    raise FileExistsError
                with fileio.open(_join(claims, str(number)), "w") as handle:
                    handle.write("")
            else:
                os.close(os.open(os.path.join(claims, str(number)),
                                 os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return number
        except FileExistsError:
            number += 1


def _sweep_temporaries(serving_dir: str, older_than: float = 0) -> None:
    """Removes copies left by killed pushes (under the push lock: none is in progress)."""
    if is_uri(serving_dir):
        return
    for name in os.listdir(serving_dir):
        path = os.path.join(serving_dir, name)
        if name.startswith(TEMP_PREFIX) and os.path.getmtime(path) <= time.time() - older_than:
            shutil.rmtree(path, ignore_errors=True)


def _copy(source: str, destination: str) -> None:
    if not is_uri(source) and not is_uri(destination):
        shutil.copytree(source, destination)
        return
    from tfx.utils import io_utils

    io_utils.copy_dir(source, destination)


def _write_record(version_dir: str, record: dict) -> None:
    fileio = _fileio()
    text = json.dumps(record, indent=1, sort_keys=True)
    if is_uri(version_dir):
        with fileio.open(_join(version_dir, PUSH_RECORD), "w") as handle:
            handle.write(text)
        return
    path = os.path.join(version_dir, PUSH_RECORD)
    with open(path, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _write_entry(entry: str, record: dict) -> None:
    text = json.dumps(record, sort_keys=True)
    if is_uri(entry):
        with _fileio().open(entry, "w") as handle:
            handle.write(text)
        return
    temporary = f"{entry}.{uuid.uuid4().hex[:8]}.tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, entry)


def _pushed_before(serving_dir: str, entry: str, digest: str) -> dict | None:
    """The record of an earlier push of this content: its ledger entry, or (a push killed
    between its rename and its ledger entry) a version's own record, then entered."""
    fileio = _fileio()
    if fileio.exists(entry):
        with fileio.open(entry, "r") as handle:
            return json.loads(handle.read())
    for version in versions(serving_dir, complete_only=False):
        if version.record.get("sha256") == digest:
            _write_entry(entry, version.record)
            return version.record
    return None


def push(source: str, serving_dir: str, *, model_uri: str = "", metric: dict | None = None,
         check: Callable[[str], None] | None = None, keep: int = 0, run_id: str = "",
         data: dict | None = None) -> PushResult:
    """Pushes the SavedModel at `source` as a new version, unless this content was pushed before.

    data: what the model was trained on ({"spans": [...], "fingerprint": ...}), recorded.
    check(path): raises if the copy at `path` does not load and serve; nothing is published then.
    keep: keep the newest `keep` versions and remove older ones (0: keep all)."""
    fileio = _fileio()
    digest = content_hash(source)
    ledger = _join(serving_dir, LEDGER, "pushed")
    fileio.makedirs(ledger)
    entry = _join(ledger, f"{digest}.json")
    with _push_lock(serving_dir):
        before = _pushed_before(serving_dir, entry, digest)
        if before is not None:
            where = _join(serving_dir, str(before["version"]))
            removed = "" if fileio.exists(where) else ", since removed"
            return PushResult(False, where, f"this model was already pushed as version "
                                            f"{before['version']}{removed}; not pushed again")
        _sweep_temporaries(serving_dir)
        number = _claim_version(serving_dir)
        final = _join(serving_dir, str(number))
        record = {"version": number, "sha256": digest, "model": model_uri, "run_id": run_id,
                  "pushed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec="seconds"), "metric": metric or {}, "data": data or {}}
        if is_uri(serving_dir):
            _copy(source, final)
            if check:
                check(final)
            _write_record(final, record)  # last: readers require it
        else:
            temporary = os.path.join(serving_dir, f"{TEMP_PREFIX}{number}-{uuid.uuid4().hex[:8]}")
            try:
                _copy(source, temporary)
                _fsync_tree(temporary)
                if check:
                    check(temporary)
                _write_record(temporary, record)
                os.rename(temporary, final)  # atomic: the version is whole or absent
                _fsync_dir(serving_dir)
            except BaseException:
                shutil.rmtree(temporary, ignore_errors=True)
                raise
        _write_entry(entry, record)
        removed = retain(serving_dir, keep) if keep else []
    note = f"pushed as version {number}"
    if removed:
        note += f"; removed old version(s) {', '.join(map(str, removed))} (keep {keep})"
    return PushResult(True, final, note)


def retain(serving_dir: str, keep: int) -> list[int]:
    """Removes all but the newest `keep` complete versions; each leaves the version list at once
    (renamed away first), so a server never sees one half-deleted. Incomplete ones are left."""
    fileio = _fileio()
    old = versions(serving_dir)[:-keep] if keep > 0 else []
    for version in old:
        if is_uri(serving_dir):
            fileio.rmtree(version.path)
            continue
        trash = os.path.join(serving_dir, LEDGER, f"removing-{version.number}-{uuid.uuid4().hex[:8]}")
        os.rename(version.path, trash)
        shutil.rmtree(trash, ignore_errors=True)
    return [v.number for v in old]
