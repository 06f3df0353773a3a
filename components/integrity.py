"""Is an artifact whole? A run that reuses a cached output reads its files again; a file truncated
by a failed copy, or with bytes overwritten, made TensorFlow raise an error that named no file
(`Cannot parse file .../saved_model.pb`, a DataLossError), and every later run tripped on the same
cached artifact.

What each output file was when written: `manifest(uri)`, its files' sizes and CRC-32s, recorded by
the local runner in ML Metadata as the artifact's custom property MANIFEST_KEY once the node that
made it has run (pipeline/local/node_worker.py); `changed(uri, manifest)` names the first file
that is no longer what was written, before a run reuses the artifact from the cache. Local files
only: an object store checks its objects' own checksums. An artifact written before manifests were
recorded has none: for Examples, `is_read_error` tells a read error from others and `corrupt_file`
reads each file (every GZIP TFRecord file to its end with TensorFlow's reader, every columnar copy
with Arrow) and names the first that does not read; that runs only after a read error.
"""

from __future__ import annotations

import json
import os
import re
import zlib

MANIFEST_KEY = "lockstep_files"  # the artifact's custom property: its files, as JSON
_BLOCK = 1 << 20


class CorruptArtifact(Exception):
    """A cached artifact is no longer what its node wrote: which node, which output, the file."""

    def __init__(self, node: str, output: str, uri: str, path: str, why: str):
        super().__init__(f"{node}'s cached {output} at {uri}: {path} {why}")
        self.node, self.output, self.uri, self.path, self.why = node, output, uri, path, why

    def __reduce__(self):  # crosses from the worker process pickled
        return type(self), (self.node, self.output, self.uri, self.path, self.why)


def _crc(path: str) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            crc = zlib.crc32(block, crc)
    return crc


def _files(uri: str) -> list[str]:
    if os.path.isfile(uri):
        return [uri]
    return sorted(os.path.join(directory, name) for directory, _, names in os.walk(uri)
                  for name in names)


def manifest(uri: str) -> str | None:
    """What the artifact's files are now, as JSON ({relative path: [size, crc32]}); None for an
    artifact on an object store or not there."""
    if "://" in uri or not os.path.exists(uri):
        return None
    return json.dumps({os.path.relpath(path, uri) if path != uri else "": [
        os.path.getsize(path), _crc(path)] for path in _files(uri)}, sort_keys=True)


def changed(uri: str, recorded: str) -> tuple[str, str] | None:
    """(path, why) of the first file of the artifact at `uri` that is not what `recorded` (a
    manifest) says was written: missing, another size, other bytes; None when all are."""
    files = json.loads(recorded)
    for relative, (size, crc) in sorted(files.items()):
        path = os.path.join(uri, relative) if relative else uri
        try:
            now = os.path.getsize(path)
            if now != size:
                return path, f"is {now} bytes, was written with {size}"
            if _crc(path) != crc:
                return path, "has other bytes than were written (its CRC-32 differs)"
        except OSError as err:
            return path, f"does not read ({err.strerror or type(err).__name__})"
    return None

_READ_ERROR = re.compile(r"DataLossError|corrupted record|incorrect header check|"
                         r"truncated record|invalid stored block|unexpected end of|"
                         r"ArrowInvalid|Invalid IPC|checksum", re.I)


def is_read_error(err: BaseException) -> bool:
    """Whether `err` says a file could not be read as what it should be (not a bug, not a
    full disk)."""
    return bool(_READ_ERROR.search(f"{type(err).__name__}: {err}"))


def corrupt_file(examples_uri: str) -> tuple[str, str] | None:
    """(path, why) of the first file of the Examples artifact at examples_uri that does not
    read whole, or None when every file reads."""
    import pyarrow as pa
    import tensorflow as tf

    from components import columnar_examples, fs

    for path in fs.glob(f"{examples_uri.rstrip('/')}/Split-*/*"):
        if path.endswith(".gz"):
            try:
                count = 0
                for batch in tf.data.TFRecordDataset(path, compression_type="GZIP").batch(4096):
                    count += int(batch.shape[0])
            except (tf.errors.DataLossError, tf.errors.OpError) as err:
                return path, f"{type(err).__name__} after {count} records"
            copy = columnar_examples.copy_path(path)
            if fs.exists(copy):
                try:
                    with pa.ipc.open_file(pa.OSFile(copy) if not fs.is_uri(copy)
                                          else pa.BufferReader(fs.read_bytes(copy))) as reader:
                        reader.read_all()
                except (pa.ArrowInvalid, OSError) as err:
                    return copy, f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    return None
