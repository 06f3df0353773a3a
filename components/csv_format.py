"""How lockstep reads a CSV: the header, missing-value tokens, and one type per column.

Shared by the ExampleGen executor (in Beam) and the CLI's check before a run, so both agree on
what a column is and both name the file, column and line when a cell does not fit.

A column is numeric when at least half of its non-missing cells are numbers; a numeric column with
text in it is an error (never a silent switch to a string feature). A column of whole numbers is
int, any decimal makes it float; everything else is a string column.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
from typing import Iterable, Iterator

INT, FLOAT, STRING = "int", "float", "string"
# Cells that mean "missing" unless data.missing_values says otherwise (the penguins source: NA).
DEFAULT_MISSING_VALUES = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None")


class CsvError(ValueError):
    """Bad CSV input; the message is one line naming the file, the column and the line."""


def read_header(path: str, text_lines: Iterable[str]) -> list[str]:
    for line in text_lines:
        if line.strip():
            header = next(csv.reader([line]))
            header = [h.strip() for h in header]
            if any(not h for h in header):
                raise CsvError(f"{path}: the header has an empty column name")
            duplicated = sorted({h for h in header if header.count(h) > 1})
            if duplicated:
                raise CsvError(f"{path}: column '{duplicated[0]}' appears twice in the header")
            return header
        break
    raise CsvError(f"{path}: the file is empty (no header row)")


def iter_rows(path: str, text: io.TextIOBase, header: list[str]) -> Iterator[tuple[int, list[str]]]:
    """Yields (line number, cells) for each data row; a row of the wrong width is an error."""
    reader = csv.reader(text)
    next(reader, None)
    for cells in reader:
        if not cells or (len(cells) == 1 and not cells[0].strip()):
            continue
        if len(cells) != len(header):
            raise CsvError(
                f"{path}: line {reader.line_num} has {len(cells)} cells, the header has {len(header)}")
        yield reader.line_num, cells


def classify(cell: str) -> str:
    try:
        int(cell)
        return INT
    except ValueError:
        pass
    try:
        value = float(cell)
    except ValueError:
        return STRING
    return FLOAT if math.isfinite(value) else STRING


@dataclasses.dataclass
class ColumnProfile:
    """Counts of each kind of cell in one column, and where the first text cell was."""

    ints: int = 0
    floats: int = 0
    texts: int = 0
    missing: int = 0
    first_text: tuple[str, int, str] | None = None  # (file, line, cell)

    def add(self, cell: str, missing: frozenset[str], where: tuple[str, int]) -> None:
        cell = cell.strip()
        if cell in missing:
            self.missing += 1
            return
        kind = classify(cell)
        if kind == INT:
            self.ints += 1
        elif kind == FLOAT:
            self.floats += 1
        else:
            self.texts += 1
            if self.first_text is None:
                self.first_text = (where[0], where[1], cell)

    def merge(self, other: "ColumnProfile") -> "ColumnProfile":
        firsts = [f for f in (self.first_text, other.first_text) if f]
        return ColumnProfile(self.ints + other.ints, self.floats + other.floats,
                             self.texts + other.texts, self.missing + other.missing,
                             min(firsts) if firsts else None)

    def kind(self, column: str) -> str:
        numbers = self.ints + self.floats
        if numbers == 0 or numbers < self.texts:
            return STRING
        if self.texts:
            path, line, cell = self.first_text
            raise CsvError(
                f"{path}: column '{column}' is numeric ({numbers} numbers) but line {line} "
                f"holds text {cell!r} ({self.texts} text cells in all)")
        return FLOAT if self.floats else INT


def column_types(header: list[str], profiles: list[ColumnProfile], path: str) -> dict[str, str]:
    types = {}
    for name, profile in zip(header, profiles):
        if profile.ints + profile.floats + profile.texts == 0:
            raise CsvError(f"{path}: column '{name}' has no values, only missing cells")
        types[name] = profile.kind(name)
    return types


def profile_rows(rows: Iterable[tuple[str, int, list[str]]], width: int,
                 missing: frozenset[str]) -> list[ColumnProfile]:
    profiles = [ColumnProfile() for _ in range(width)]
    for path, line, cells in rows:
        for profile, cell in zip(profiles, cells):
            profile.add(cell, missing, (path, line))
    return profiles


def locate(path: str, span_pattern: str = "") -> tuple[str, str]:
    """(input_base, file pattern) that the ExampleGen reads for data.path: a directory of spans,
    one CSV file, or a directory of CSV files. Remote paths are not listed: one is a file when it
    ends with .csv."""
    from components import spans

    if span_pattern:
        return path.rstrip("/"), spans.as_glob(span_pattern)
    is_file = path.endswith(".csv") if "://" in path else os.path.isfile(path)
    if is_file:
        return os.path.dirname(path), os.path.basename(path)
    return path.rstrip("/"), "*.csv"

