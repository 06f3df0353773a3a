"""How lockstep reads a CSV: the header, missing-value tokens, one type per column, and the
encoding to tf.Examples, all on Arrow record batches (no Python per row or per cell).

Shared by the ExampleGen executor (in Beam) and the CLI's check before a run, so both agree on
what a column is and both name the file, column and line when a cell does not fit.

A file is read in byte ranges (`plan_reads`), each as a stream of Arrow record batches of string
columns (pyarrow's C++ CSV reader). A cell is stripped of surrounding whitespace; a configured
missing token (`NA`, empty, ...) is an absent feature. A column is numeric when at least half of
its non-missing cells are numbers; a numeric column with text in it is an error (never a silent
switch to a string feature). A column of whole numbers is int, any decimal makes it float;
everything else is a string column. Numbers are strict ASCII: `1_000` and non-ASCII digits are
text, an integer beyond int64 is an error, a number that overflows a double is text.

The fast path only raises Arrow's terse errors; when one comes, the file is read once more with
Python's csv module to name the line (`_explain`), so errors stay one precise line.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import sys
from typing import BinaryIO, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from components import fs
from runtime import exit_status

INT, FLOAT, STRING = "int", "float", "string"
# Cells that mean "missing" unless data.missing_values says otherwise (the penguins source: NA).
DEFAULT_MISSING_VALUES = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None")
INT_PATTERN = r"^[+-]?[0-9]+$"
FLOAT_PATTERN = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
BLOCK_BYTES = 4 << 20  # bytes per Arrow record batch: ~40k rows of a 100-byte row
MAX_BLOCK_BYTES = 1 << 30  # the longest row read (a block must hold a whole row)
RANGE_BYTES = 64 << 20  # bytes per unit of parallel work in a large file

csv.field_size_limit(sys.maxsize)  # the explaining reader: no 128 KiB cap on a cell


class CsvError(ValueError):
    """Bad CSV input; the message is one line naming the file, the column and the line."""

    lockstep_exit_status = exit_status.INPUT


def _text(path: str, handle: BinaryIO) -> io.TextIOWrapper:
    return io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")


def read_header(path: str) -> tuple[list[str], int]:
    """The header's column names (stripped) and the byte offset where the data rows start."""
    with fs.open_binary(path) as handle:
        offset = 0
        while True:
            raw = handle.readline()
            if not raw:
                raise CsvError(f"{path}: the file is empty (no header row)")
            start, offset = offset, offset + len(raw)
            try:
                line = raw.decode("utf-8-sig" if start == 0 else "utf-8")
            except UnicodeDecodeError as err:
                raise CsvError(f"{path}: not UTF-8 text (byte {start + err.start})") from None
            if line.strip():
                break
    header = [h.strip() for h in next(csv.reader([line]))]
    if any(not h for h in header):
        raise CsvError(f"{path}: the header has an empty column name")
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise CsvError(f"{path}: column '{duplicated[0]}' appears twice in the header")
    return header, offset


@dataclasses.dataclass(frozen=True)
class Read:
    """One unit of reading: the data rows of `path` that start in [start, end)."""

    path: str
    start: int
    end: int  # -1: to the end of the file


def plan_reads(path: str, data_offset: int, range_bytes: int = RANGE_BYTES) -> list[Read]:
    """Byte ranges of one file. A file with a quote character in it is one range (a quoted cell
    may hold a newline, so a line break is not surely a row break there); others are cut every
    `range_bytes`, each range owning the rows that start inside it."""
    size = fs.size(path)
    if size - data_offset <= range_bytes or _has_quote(path):
        return [Read(path, data_offset, -1)]
    cuts = list(range(data_offset, size, range_bytes))
    return [Read(path, a, b) for a, b in zip(cuts, cuts[1:] + [-1])]


def _has_quote(path: str) -> bool:
    with fs.open_binary(path) as handle:
        while chunk := handle.read(16 << 20):
            if b'"' in chunk:
                return True
    return False


def _skip_blank(row) -> str:
    return "skip" if not row.text.strip() else "error"


def record_batches(read: Read, header: list[str], block_bytes: int | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """The rows of one read as record batches of string columns named by the header. A row
    longer than a block makes Arrow give up; the read starts again with blocks 8 times larger,
    past the rows already given, up to MAX_BLOCK_BYTES."""
    block, given = block_bytes or BLOCK_BYTES, 0
    while True:
        try:
            skip = given
            for batch in _record_batches(read, header, block):
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                batch, skip = batch.slice(skip), 0
                given += batch.num_rows
                yield batch
            return
        except pa.ArrowInvalid as err:
            if "straddl" not in str(err) or block >= MAX_BLOCK_BYTES:
                raise _explain(read.path, header, str(err)) from None
            block = min(block * 8, MAX_BLOCK_BYTES)


def _record_batches(read: Read, header: list[str], block: int) -> Iterator[pa.RecordBatch]:
    options = pa_csv.ReadOptions(column_names=header, block_size=block, use_threads=False)
    parse = pa_csv.ParseOptions(newlines_in_values=True, invalid_row_handler=_skip_blank)
    convert = pa_csv.ConvertOptions(column_types={h: pa.string() for h in header},
                                    strings_can_be_null=False, quoted_strings_can_be_null=False,
                                    null_values=[])
    stream = _native_stream(read)
    if stream is None:
        return  # no rows in this range
    with stream:
        for batch in pa_csv.open_csv(stream, read_options=options, parse_options=parse,
                                     convert_options=convert):
            if batch.num_rows:
                yield batch


def _native_stream(read: Read):
    """The read's bytes as an Arrow stream that never calls back into Python (Arrow reads on its
    own threads, and a Python file there needs the GIL: a deadlock beside our worker threads).
    A local file to its end streams from disk; a byte range (at most RANGE_BYTES and a row) or
    a remote file's part is read into one buffer."""
    with fs.open_binary(read.path) as handle:
        begin = read.start
        if begin > 0 and not _starts_row(handle, begin):
            handle.seek(begin)
            handle.readline()  # the row that began before start belongs to the previous range
            begin = handle.tell()
        stop = -1
        if read.end >= 0:
            if begin >= read.end:
                return None
            handle.seek(read.end)
            if not _starts_row(handle, read.end):
                handle.readline()  # finish the row that crosses end
            stop = handle.tell()
        if not fs.is_uri(read.path) and stop < 0:
            stream = pa.OSFile(read.path)
            stream.seek(begin)
            if stream.size() <= begin:
                stream.close()
                return None
            return stream
        handle.seek(begin)
        data = handle.read() if stop < 0 else handle.read(stop - begin)
    return pa.BufferReader(data) if data else None


def _starts_row(handle: BinaryIO, offset: int) -> bool:
    handle.seek(offset - 1)
    return handle.read(1) == b"\n"


def _python_rows(path: str) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) of each data row, read by Python's csv module: the slow reader that names
    lines for errors (blank rows skipped, as Arrow does)."""
    with fs.open_binary(path) as handle:
        reader = csv.reader(_text(path, handle))
        next(reader, None)
        for cells in reader:
            if cells and not (len(cells) == 1 and not cells[0].strip()):
                yield reader.line_num, cells


def _explain(path: str, header: list[str], arrow_message: str) -> CsvError:
    """The one-line error for a file Arrow refused: read it again with Python to find where."""
    try:
        for line, row in _python_rows(path):
            if len(row) != len(header):
                return CsvError(f"{path}: line {line} has {len(row)} cells, "
                                f"the header has {len(header)}")
    except UnicodeDecodeError as err:
        return CsvError(f"{path}: not UTF-8 text (byte {err.start})")
    except csv.Error as err:
        return CsvError(f"{path}: {err}")
    return CsvError(f"{path}: {arrow_message.splitlines()[0]}")


def cells(column: pa.Array, missing: pa.Array) -> pa.Array:
    """A string column with each cell stripped and each missing token a null."""
    stripped = pc.utf8_trim_whitespace(column)
    return pc.if_else(pc.is_in(stripped, value_set=missing), None, stripped)


def clean(batch: pa.RecordBatch, missing: pa.Array) -> pa.RecordBatch:
    """The batch with every cell stripped and every missing token a null: what profiling,
    splitting and typing read (computed once per batch)."""
    return pa.RecordBatch.from_arrays([cells(c, missing) for c in batch.columns],
                                      batch.schema.names)


def missing_tokens(missing_values: Iterable[str]) -> pa.Array:
    return pa.array(sorted(set(missing_values)), pa.string())


@dataclasses.dataclass
class ColumnProfile:
    """Counts of each kind of cell in one column; `overflow`: an integer beyond int64."""

    ints: int = 0
    floats: int = 0
    texts: int = 0
    missing: int = 0
    overflow: str | None = None

    def merge(self, other: "ColumnProfile") -> "ColumnProfile":
        return ColumnProfile(self.ints + other.ints, self.floats + other.floats,
                             self.texts + other.texts, self.missing + other.missing,
                             self.overflow or other.overflow)

    def kind(self) -> str:
        numbers = self.ints + self.floats
        if numbers == 0 or numbers < self.texts:
            return STRING
        return FLOAT if self.floats else INT


def _kinds(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Masks (is an int, is a finite float that is not an int) of a column of non-null cells."""
    is_int = pc.match_substring_regex(values, INT_PATTERN)
    if pc.all(is_int).as_py() is not False:  # every cell an int (or none): no float among them
        return is_int, pc.invert(is_int)
    is_float = pc.and_(pc.invert(is_int), pc.match_substring_regex(values, FLOAT_PATTERN))
    if pc.any(is_float).as_py():
        as_float = pc.cast(pc.if_else(is_float, values, "0"), pa.float64())
        is_float = pc.and_(is_float, pc.is_finite(as_float))
    return is_int, is_float


def profile_batch(cleaned: pa.RecordBatch) -> list[ColumnProfile]:
    """Each column's counts, from a batch that went through `clean`."""
    profiles = []
    for values in cleaned.columns:
        present = values.drop_null() if values.null_count else values
        is_int, is_float = _kinds(present)
        ints, floats = pc.sum(is_int).as_py() or 0, pc.sum(is_float).as_py() or 0
        overflow = None
        if ints:
            long_ints = pc.filter(present, pc.and_(is_int, pc.greater(pc.utf8_length(present), 18)))
            for value in long_ints.to_pylist():  # only integers of 19 digits or more
                if not -2**63 <= int(value) < 2**63:
                    overflow = value
                    break
        profiles.append(ColumnProfile(ints, floats, len(present) - ints - floats,
                                      len(values) - len(present), overflow))
    return profiles


def merge_profiles(many: Iterable[list[ColumnProfile]]) -> list[ColumnProfile] | None:
    merged = None
    for profiles in many:
        merged = profiles if merged is None else [a.merge(b) for a, b in zip(merged, profiles)]
    return merged


def column_types(header: list[str], profiles: list[ColumnProfile], where: str,
                 files: Iterable[str] = (), missing_values: Iterable[str] = ()) -> dict[str, str]:
    """One type per column; `files` are searched for the line to name when a column is wrong."""
    types = {}
    for name, profile in zip(header, profiles):
        kind = profile.kind()  # a column of missing cells alone: text (the run leaves it out)
        if kind != STRING and profile.texts:
            path, line, cell = _first_text(files, header.index(name), missing_values)
            raise CsvError(
                f"{path}: column '{name}' is numeric ({profile.ints + profile.floats} numbers) "
                f"but line {line} holds text {cell!r} ({profile.texts} text cells in all)")
        if kind == INT and profile.overflow is not None:
            path, line, _ = _first_text(files, header.index(name), (),
                                        lambda cell, overflow=profile.overflow: cell == overflow)
            raise CsvError(f"{path}: column '{name}' line {line} holds {profile.overflow}, "
                           "an integer beyond the int64 range")
        types[name] = kind
    return types


def _is_text(cell: str) -> bool:
    values = pa.array([cell])
    is_int, is_float = _kinds(values)
    return not (is_int[0].as_py() or is_float[0].as_py())


def _first_text(files: Iterable[str], at: int, missing_values: Iterable[str],
                matches=None) -> tuple[str, int | str, str]:
    """(file, line, cell) of the first cell in column `at` that is text (or `matches`)."""
    missing = set(missing_values)
    matches = matches or (lambda cell: cell not in missing and _is_text(cell))
    for path in files:
        for line, row in _python_rows(path):
            if len(row) > at and matches(row[at].strip()):
                return path, line, row[at].strip()
    return next(iter(files), "?"), "?", "?"


def numbered_batches(read: Read, header: list[str]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(number of its first row within the read, batch) of each of `record_batches`: a row's
    place, which the split rule hashes (components/row_split.py)."""
    first = 0
    for batch in record_batches(read, header):
        yield first, batch
        first += batch.num_rows


def relative_name(path: str, input_base: str) -> str:
    """A file's name relative to the data root ("span-3/part-0.csv"): its identity within the
    data, wherever the root is."""
    base = input_base.rstrip("/") + "/"
    return path[len(base):] if path.startswith(base) else path.rsplit("/", 1)[-1]


def typed_batch(cleaned: pa.RecordBatch, types: dict[str, str]) -> pa.RecordBatch:
    """A `clean` batch as tf.Example-ready columns: a one-value list per present cell, a null
    list per missing one; int64, float32 (through float64, as Python's float() then
    FloatList), or the cell's UTF-8 bytes. Laid out as tfx_bsl's decoder lays out what it
    decodes (a null list is empty: it holds no hidden value), since the columnar copy of the
    records (components/columnar_examples.py) stands in for that decoder's output."""
    arrays, names = [], []
    for name, values in zip(cleaned.schema.names, cleaned.columns):
        kind = types[name]
        if kind == INT:
            values = pc.cast(values, pa.int64())
        elif kind == FLOAT:
            values = pc.cast(pc.cast(values, pa.float64()), pa.float32())
        else:
            values = pc.cast(values, pa.large_binary())
        if values.null_count:
            present = pc.is_valid(values).to_numpy(zero_copy_only=False)
            offsets = np.concatenate([[0], np.cumsum(present, dtype=np.int64)])
            lists = pa.LargeListArray.from_arrays(
                pa.array(offsets), pc.drop_null(values), mask=pa.array(~present))
        else:
            lists = pa.LargeListArray.from_arrays(
                pa.array(np.arange(len(values) + 1, dtype=np.int64)), values)
        arrays.append(lists)
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names)


def locate(path: str, span_pattern: str = "") -> tuple[str, str]:
    """(input_base, file pattern) that the ExampleGen reads for data.path: a directory of spans,
    one CSV file, or a directory of CSV files. Remote paths are not listed: one is a file when it
    ends with .csv."""
    from components import spans

    if span_pattern:
        return path.rstrip("/"), spans.as_glob(span_pattern)
    is_file = path.endswith(".csv") if fs.is_uri(path) else os.path.isfile(path)
    if is_file:
        return os.path.dirname(path), os.path.basename(path)
    return path.rstrip("/"), "*.csv"
