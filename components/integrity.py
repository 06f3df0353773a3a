"""Is an Examples artifact whole? A run that reuses a cached ExampleGen output reads its files
again; a file truncated by a failed copy, or with bytes overwritten, made TensorFlow raise a
DataLossError that named no file, and every later run tripped on the same cached artifact.

`is_read_error` tells such an error from others; `corrupt_file` reads each file of the artifact
(every GZIP TFRecord file to its end with TensorFlow's reader, every columnar copy with Arrow)
and names the first that does not read, and why. Reading is C++ end to end, and it runs only
after a read error, never on a healthy run.
"""

from __future__ import annotations

import re

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
