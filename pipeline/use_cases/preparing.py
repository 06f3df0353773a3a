"""A run, checked and decided before anything runs: the data read once (local data; remote data is
left to the ExampleGen), the decisions taken (task, column roles, gate), the split's skew, the
drift between spans, whether anything is new, and whether the run can write where it writes.

It writes nothing and loads no TensorFlow: everything here is Arrow and the standard library, so
bad input is one line in seconds. It runs nothing either: local_run, verification and compiling
take what it returns.
"""

from __future__ import annotations

import dataclasses
import os

from components import csv_format, fs
from pipeline import preflight, split_check, storage
from pipeline.config import Config
from pipeline.data_check import DataInfo


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A run, checked and decided, before anything runs.

    Attributes:
      config: the config, absolutized.
      data: the data check's DataInfo (pipeline/data_check.py); None for remote data, which is
        not read before the run.
      decisions: the task, the columns' roles and the gate (pipeline/preflight.py).
      drift: how far the newest span moved from the one before it, or None.
      code: what the check of the user's own code said (preflight.check_hooks).
      skew: how the train and eval rows compare (pipeline/split_check.py), or None.
    """

    config: Config
    data: DataInfo | None
    decisions: preflight.Decisions
    drift: preflight.DriftCheck | None = None
    code: tuple[str, ...] = ()
    skew: split_check.SkewCheck | None = None

    @property
    def task(self) -> str:
        return f"{self.decisions.task} ({self.decisions.task_reason})"

    @property
    def source(self) -> tuple[str, str]:
        """(input_base, pattern): what the ExampleGen reads. The data check's for local data;
        for remote data, from data.path as a compile takes them (components/csv_format.locate)."""
        if self.data is not None:
            return self.data.input_base, self.data.pattern
        return csv_format.locate(self.config.data.path, self.config.data.span_pattern)

    def lines(self) -> list[str]:
        """What a run says before it starts: the data (or that it is remote and not read here),
        the columns that are not features, the gate and the user's code."""
        lines = []
        if self.data is not None:
            data = self.data
            spans = f" of span(s) {', '.join(map(str, data.spans))}" if data.spans else ""
            lines.append(f"lockstep: {data.rows} rows from {len(data.files)} CSV file(s){spans}, "
                         f"label '{self.config.data.label}', {len(data.columns) - 1} columns; "
                         f"task {self.task}")
        else:
            lines.append(f"lockstep: data {self.config.data.path} is remote: not checked before "
                         f"the run (the ExampleGen reads it), label '{self.config.data.label}'; "
                         f"task {self.task}")
        return (lines + (self.skew.lines() if self.skew else []) + self.decisions.column_lines()
                + [self.decisions.gate_line()] + list(self.code))


def prepare(config: Config, places: bool = True, serving: bool = True) -> Prepared:
    """Checks local data (remote data is not read) and takes the decisions a run or a compile
    is built from.

    Args:
      config: the config, absolutized.
      places: probe the local pipeline root and serving dir for a write and room
        (check_storage); a compile, which runs nothing here, passes False and writes nothing.
      serving: with places, the serving dir too (its room, and that its model answers this
        run's label and task); `lockstep verify`, which pushes nothing, passes False.
    Returns:
      the Prepared run; its drift is not measured yet (check_drift).
    Raises:
      ConfigError, CsvError, SpanError: the config, the user's code or the data, named; and
        (places and serving) a serving dir whose model answers another label or task.
      SkewError: the train and eval rows differ past data.max_skew, the column named.
      StorageError: a local pipeline root or serving dir is read-only or lacks room (places).
    """
    data = preflight.check_local(config)
    decisions = preflight.decide(config, data)
    skew = preflight.check_skew(config, data, decisions)
    prepared = Prepared(config, data, decisions,
                        code=tuple(preflight.check_hooks(config, decisions, data)), skew=skew)
    if places:
        check_storage(prepared, serving=serving)
    if places and serving:
        preflight.check_serving_target(config, decisions)
    return prepared


def check_drift(prepared: Prepared) -> Prepared:
    """For data in spans: measures how far the newest complete span moved from the one before it
    (Arrow only, before TensorFlow loads).

    Returns:
      `prepared` with its drift (None when there is nothing to compare).
    Raises:
      DriftError: a feature moved past its bound, named with its score.
    """
    return dataclasses.replace(prepared,
                               drift=preflight.check_drift(prepared.config, prepared.data))


def nothing_new(prepared: Prepared) -> str | None:
    """The line to say when the complete spans a run would read are those the serving model was
    trained on (so there is nothing to run), else None."""
    return preflight.nothing_new(prepared.config, prepared.data)


def check_storage(prepared: Prepared, serving: bool = True, remote: bool = False) -> None:
    """The pipeline root (and, with `serving`, the serving dir) take a file and have room for
    the run (pipeline/storage.py). prepare() checks the local places; a run checks the
    object-store ones (`remote`) as it starts, since a compile makes no write there.

    Raises:
      StorageError: naming the place.
    """
    config = prepared.config
    input_bytes = sum(os.path.getsize(f) for f in prepared.data.files) if prepared.data else 0
    places = storage.places(config.paths.pipeline_root, config.paths.serving_dir, input_bytes)
    storage.check([p for p in (places if serving else places[:1])
                   if fs.is_uri(p.path) == remote])
