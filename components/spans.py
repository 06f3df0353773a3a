"""Spans: data that arrives in numbered batches, `data_root/span-{SPAN}/*.csv`.

TFX resolves `{SPAN}` in ExampleGen's driver, which LocalDagRunner runs and open-source KFP does
not (it ignores the driver hook). So lockstep resolves spans in the ExampleGen executor, which
every orchestrator runs: list what matches the pattern with `{SPAN}` as a wildcard, read the span
number back out of each path, and take the newest one (or the newest `window`).

A span is complete only when its marker file (e.g. `_SUCCESS`, what Hadoop, Spark and Beam write
when they finish) sits in each directory that holds its files: a span being uploaded is
skipped until its writer puts the marker there, last. An empty marker name takes every span.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from runtime import exit_status

SPAN = "{SPAN}"


class SpanError(ValueError):
    """No span matches, or a pattern that cannot be resolved; the message names the pattern."""

    lockstep_exit_status = exit_status.INPUT


def as_glob(span_pattern: str) -> str:
    """The pattern with {SPAN} as a wildcard (what TFX's driver fingerprints for its cache)."""
    return span_pattern.replace(SPAN, "*")


def _regex(full_pattern: str) -> re.Pattern:
    head, tail = full_pattern.split(SPAN)
    glob_to_re = lambda text: "".join(  # noqa: E731 - used twice, just below
        "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in text)
    return re.compile(glob_to_re(head) + r"(\d+)" + glob_to_re(tail) + "$")


def _fileio_glob(pattern: str) -> list[str]:
    from tfx.dsl.io import fileio  # gs://, s3:// and local alike (imports TensorFlow)

    return fileio.glob(pattern)


Glob = Callable[[str], Iterable[str]]
Exists = Callable[[str], bool]
DEFAULT_MARKER = "_SUCCESS"


def _fileio_exists(path: str) -> bool:
    from tfx.dsl.io import fileio

    return fileio.exists(path)


def is_complete(files: list[str], marker: str, exists: Exists = _fileio_exists) -> bool:
    if not marker:
        return True
    return all(exists(f"{directory}/{marker}")
               for directory in sorted({path.rsplit("/", 1)[0] for path in files}))


def group(paths: Iterable[str], full_pattern: str) -> dict[int, list[str]]:
    """{span number: its paths, sorted}, for the paths that match full_pattern (with {SPAN})."""
    regex = _regex(full_pattern)
    spans: dict[int, list[str]] = {}
    for path in sorted(paths):
        match = regex.match(path)
        if match:
            spans.setdefault(int(match.group(1)), []).append(path)
    return spans


def find(input_base: str, span_pattern: str, glob: Glob = _fileio_glob) -> dict[int, list[str]]:
    """{span number: its files}, for every file under input_base that matches the pattern."""
    full = f"{input_base.rstrip('/')}/{span_pattern}"
    return group(glob(as_glob(full)), full)


def select(input_base: str, span_pattern: str, window: int = 1, glob: Glob = _fileio_glob,
           marker: str = DEFAULT_MARKER,
           exists: Exists = _fileio_exists) -> tuple[list[int], list[str]]:
    """The newest `window` complete spans and their files, oldest first."""
    found = find(input_base, span_pattern, glob)
    where = f"{input_base.rstrip('/')}/{span_pattern}"
    if not found:
        raise SpanError(f"{where}: no span matches "
                        f"(expected e.g. {span_pattern.replace(SPAN, '1')})")
    spans = {n: files for n, files in found.items() if is_complete(files, marker, exists)}
    if not spans:
        newest = max(found)
        raise SpanError(f"{where}: no complete span: span {newest} (the newest) has no {marker} "
                        f"in {found[newest][0].rsplit('/', 1)[0]} yet; a span is used once its "
                        f"writer adds that file (data.span_marker)")
    chosen = sorted(spans)[-window:]
    files = [path for span in chosen for path in spans[span]]
    _inside(input_base, files)
    return chosen, files


def _inside(input_base: str, files: list[str]) -> None:
    """Raises SpanError for a local file that resolves outside the data root (a span directory
    that is a symlink out of it, or a `..` in its path): a span reads what is under the root."""
    if "://" in input_base:
        return
    import os

    root = os.path.realpath(input_base)
    for path in files:
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise SpanError(f"{path}: resolves to {os.path.realpath(path)}, outside the data "
                            f"root {input_base} (a symlink or '..'): refused")


def _stat(path: str) -> tuple[int, int]:
    """(size, modification time in whole seconds): a local file without TensorFlow."""
    if "://" not in path:
        import os

        stat = os.stat(path)
        return stat.st_size, int(stat.st_mtime)
    from tfx.dsl.io import fileio

    stat = fileio.stat(path)
    return stat.length, stat.mtime_nsec // 10**9


def fingerprint(files: Iterable[str], stat: Callable[[str], tuple[int, int]] = _stat) -> str:
    """What the chosen files are: each path, size and modification time, hashed. A new, changed
    or removed file of a chosen span changes it; a span still being uploaded (not chosen, no
    marker yet) does not. The ExampleGen's cache key and the push record both use it."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(files):
        size, mtime = stat(path)
        digest.update(f"{path}\t{size}\t{mtime}\n".encode())
    return "spans-sha256:" + digest.hexdigest()
