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
again, also after its version was removed: a rollback stays rolled back. But a version whose files
no longer hold what was pushed (a disk fault) does not count: the same model is pushed again, as
a new version, which a server then serves instead.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import time
from typing import Callable

from components import fs
from components.fs import join as _join

PUSH_RECORD = "lockstep-push.json"
SAVED_MODEL = "saved_model.pb"
LEDGER = ".lockstep"
TEMP_PREFIX = ".push-"
TARGET_KEY = "target"  # in a push record: what the model answers, {"label": ..., "task": ...}


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


class OtherTarget(ValueError):
    """The serving dir serves a model of another label or task than the run's."""


def target(label: str, task: str) -> dict:
    """What a model answers, as its push record names it."""
    return {"label": label, "task": task}


def check_target(serving_dir: str, number: int | None, record: dict | None, run: dict) -> None:
    """Raises OtherTarget where version `number` (its push `record`) answers another label or
    task than `run` (target()): the run's Evaluator could not compare its model with that one,
    and its push would replace what the served model's clients ask for. A version whose record
    names no target (pushed before records named one) passes."""
    pushed = (record or {}).get(TARGET_KEY) or {}
    if not pushed or not run or all(pushed.get(k) == v for k, v in run.items()):
        return
    raise OtherTarget(
        f"serving dir {serving_dir} serves version {number}, a model of label "
        f"'{pushed.get('label')}' ({pushed.get('task')}), and this run's label is "
        f"'{run['label']}' ({run['task']}): its model could neither be compared with that one nor "
        "replace it; give this pipeline a serving dir of its own (--serving-dir, "
        "paths.serving_dir)")


def _read_record(version_dir: str) -> dict | None:
    fileio = fs.fileio()
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

    fileio = fs.fileio()
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
    fileio = fs.fileio()
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
    fileio = fs.fileio()
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


def _claim_version(serving_dir: str) -> int:
    """The next version number: at least now, above every number ever claimed; exclusive."""
    fileio = fs.fileio()
    claims = _join(serving_dir, LEDGER, "versions")
    fileio.makedirs(claims)
    taken = [int(n.rstrip("/")) for n in fileio.listdir(claims) if n.rstrip("/").isdigit()]
    taken += [int(n.rstrip("/")) for n in fileio.listdir(serving_dir) if n.rstrip("/").isdigit()]
    number = max([int(time.time())] + [n + 1 for n in taken])
    while True:
        try:
            fs.create_exclusive(_join(claims, str(number)))
            return number
        except FileExistsError:
            number += 1


def _pushed_before(serving_dir: str, entry: str, digest: str) -> dict | None:
    """The record of an earlier push of this content: its ledger entry, or (a push killed
    between its rename and its ledger entry) a version's own record, then entered."""
    fileio = fs.fileio()
    if fileio.exists(entry):
        with fileio.open(entry, "r") as handle:
            return json.loads(handle.read())
    for version in versions(serving_dir, complete_only=False):
        if version.record.get("sha256") == digest:
            fs.write_text(entry, json.dumps(version.record, sort_keys=True))
            return version.record
    return None


def push(source: str, serving_dir: str, *, model_uri: str = "", metric: dict | None = None,
         check: Callable[[str], None] | None = None, keep: int = 0, run_id: str = "",
         data: dict | None = None, digest: str = "", answers: dict | None = None) -> PushResult:
    """Pushes the SavedModel at `source` as a new version, unless this content was pushed before.

    data: what the model was trained on ({"spans": [...], "fingerprint": ...}), recorded.
    check(path): raises if the copy at `path` does not load and serve; nothing is published then.
    keep: keep the newest `keep` versions and remove older ones (0: keep all).
    digest: content_hash(source), where the caller has it already.
    answers: what the model answers (target()), recorded for later runs' check_target."""
    fileio = fs.fileio()
    digest = digest or content_hash(source)
    ledger = _join(serving_dir, LEDGER, "pushed")
    fileio.makedirs(ledger)
    entry = _join(ledger, f"{digest}.json")
    with fs.lock(_join(serving_dir, LEDGER, "lock")):  # one push at a time (local disks)
        before = _pushed_before(serving_dir, entry, digest)
        repushed = ""
        if before is not None:
            where = _join(serving_dir, str(before["version"]))
            if fileio.exists(where) and content_hash(where) != digest:  # damaged since its push
                repushed = (f"; version {before['version']} no longer held what was pushed "
                            "(sha256), so this model was pushed again")
            else:
                removed = "" if fileio.exists(where) else ", since removed"
                return PushResult(False, where, f"this model was already pushed as version "
                                                f"{before['version']}{removed}; not pushed again")
        fs.sweep(serving_dir, TEMP_PREFIX)  # copies left by killed pushes (none in progress)
        number = _claim_version(serving_dir)
        final = _join(serving_dir, str(number))
        record = {"version": number, "sha256": digest, "model": model_uri, "run_id": run_id,
                  "pushed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec="seconds"), "metric": metric or {}, "data": data or {}}
        if answers:
            record[TARGET_KEY] = answers
        with fs.publishing(final, TEMP_PREFIX) as staging:
            fs.copy_tree(source, staging)
            if check:
                check(staging)
            fs.write_text(_join(staging, PUSH_RECORD),  # last: readers require it
                          json.dumps(record, indent=1, sort_keys=True))
        fs.write_text(entry, json.dumps(record, sort_keys=True))
        removed = retain(serving_dir, keep) if keep else []
    note = f"pushed as version {number}{repushed}"
    if removed:
        note += f"; removed old version(s) {', '.join(map(str, removed))} (keep {keep})"
    return PushResult(True, final, note)


def retain(serving_dir: str, keep: int) -> list[int]:
    """Removes all but the newest `keep` complete versions; each leaves the version list at once
    (renamed away first), so a server never sees one half-deleted. Incomplete ones are left."""
    old = versions(serving_dir)[:-keep] if keep > 0 else []
    for version in old:
        fs.remove_tree(version.path, trash_dir=_join(serving_dir, LEDGER))
    return [v.number for v in old]
