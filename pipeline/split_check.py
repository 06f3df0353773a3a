"""Is the split sound? The train and eval rows compared before anything runs.

The check before the run reads every row once (pipeline/data_check.py); `Tally` applies the same
split rule the ExampleGen applies (components/row_split.py) to the same rows and counts, per split,
each column's cells: a number's count, sum and sum of squares, a text column's value counts (up to
VALUES_COUNTED values), and the missing cells. `measure` then scores each feature and the label:

- a number: the standardized mean difference |mean_train - mean_eval| / pooled std (SMD);
- text, and a classification label: the L-infinity distance of the values' shares (a missing
  cell a value of its own), TFDV's skew measure for categorical features.

A random split of n and m rows scores about sqrt(1/n + 1/m) (SMD) or sqrt(p(1-p)(1/n + 1/m)) (a
share p) by chance alone; a score is beyond the bound only when it passes both `data.max_skew`
and CHANCE_SDS times that (so 59 eval rows of penguins do not stop a run on noise). With a group
split (data.split_by) the keys are not measured (each group is on one side by design), and a
column that follows the groups differs between the sides by more than a row split would: with
few groups that is what the check is for, an eval side unlike the train side.
"""

from __future__ import annotations

import dataclasses
import math

import pyarrow as pa
import pyarrow.compute as pc

from components import csv_format, row_split
from pipeline.column_roles import CONSTANT, FEATURE
from runtime import exit_status
from trainer_module.settings import CLASSIFICATION

VALUES_COUNTED = 1000  # a text column with more values is not measured (an id, free text)
CHANCE_SDS = 4.0
SPLITS = ("train", "eval")


class SkewError(ValueError):
    """The train and eval rows differ beyond data.max_skew: the message names the column."""

    lockstep_exit_status = exit_status.INPUT


class _Column:
    """One column's cells in one split: numeric moments (while every cell is a number), value
    counts (while there are at most VALUES_COUNTED values), and missing cells."""

    def __init__(self):
        self.n, self.total, self.squares, self.numeric = 0, 0.0, 0.0, True
        self.counts: dict[str, int] | None = {}
        self.missing = 0

    def add(self, values: pa.Array) -> None:
        self.missing += values.null_count
        present = values.drop_null() if values.null_count else values
        if self.numeric:
            try:
                numbers = pc.cast(present, pa.float64())
                self.n += len(numbers)
                self.total += pc.sum(numbers).as_py() or 0.0
                self.squares += pc.sum(pc.multiply(numbers, numbers)).as_py() or 0.0
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                self.numeric = False
        if self.counts is not None:
            counted = pc.value_counts(present)
            if len(counted) > VALUES_COUNTED:  # past counting: no Python over its values
                self.counts = None
                return
            for value, count in zip(counted.field("values").to_pylist(),
                                    counted.field("counts").to_pylist()):
                self.counts[value] = self.counts.get(value, 0) + count
            if len(self.counts) > VALUES_COUNTED:
                self.counts = None

    def mean_var(self) -> tuple[float, float]:
        mean = self.total / self.n
        return mean, max(self.squares / self.n - mean * mean, 0.0)


class Tally:
    """Per split, each column's cells, batch by batch, as the ExampleGen will split them."""

    def __init__(self, header: list[str], rule: row_split.SplitRule, input_base: str):
        self.header, self.rule, self.input_base = header, rule, input_base
        self.rows = [0] * len(rule.buckets)
        self.columns = [{name: _Column() for name in header} for _ in rule.buckets]

    def add(self, cleaned: pa.RecordBatch, path: str, read_start: int, first_row: int) -> None:
        splits = self.rule.assign(cleaned, csv_format.relative_name(path, self.input_base),
                                  read_start, first_row)
        for split, columns in enumerate(self.columns):
            mask = splits == split
            taken = int(mask.sum())
            if not taken:
                continue
            self.rows[split] += taken
            part = cleaned.filter(pa.array(mask)) if taken < len(mask) else cleaned
            for name, values in zip(self.header, part.columns):
                columns[name].add(values)


@dataclasses.dataclass(frozen=True)
class Skew:
    column: str
    measure: str  # "SMD" | "L-inf"
    score: float
    chance: float  # what a random split of these sizes scores, one standard deviation
    bound: float
    detail: str = ""  # the value whose share moved most (L-inf)

    @property
    def beyond(self) -> bool:
        return self.score > self.bound and self.score > CHANCE_SDS * self.chance

    def words(self) -> str:
        """"island (L-inf 0.130 at 'Biscoe'; past 0.1 but within 4x the 0.060 a random split
        gives)": the score against both bounds."""
        at = f" at {self.detail!r}" if self.detail else ""
        if self.score <= self.bound:
            verdict = f"within {self.bound:g}; a random split gives about {self.chance:.3f}"
        else:
            verdict = (f"past {self.bound:g} {'and' if self.beyond else 'but within'} "
                       f"{CHANCE_SDS:g}x the {self.chance:.3f} a random split gives")
        return f"{self.column} ({self.measure} {self.score:.3f}{at}; {verdict})"


@dataclasses.dataclass(frozen=True)
class SkewCheck:
    """The split rule, each split's rows and label, and each measured column's skew (the label
    first, then the features, largest first)."""

    rule: dict  # row_split.SplitRule.to_dict()
    rule_words: str
    rows: dict[str, int]
    label: dict[str, dict]  # split -> {value: share} or {mean, std}
    skews: tuple[Skew, ...]
    max_skew: float

    def lines(self) -> list[str]:
        label = "; ".join(f"{split} " + ", ".join(
            f"{k} {v:.3f}" for k, v in list(values.items())[:6])
                          for split, values in self.label.items())
        top = ", ".join(s.words() for s in self.skews[:3])
        return [f"lockstep: split {self.rule_words}: "
                + ", ".join(f"{split} {n} rows" for split, n in self.rows.items()),
                f"lockstep: label by split: {label}",
                f"lockstep: skew between train and eval: no column past both bounds "
                f"({self.bounds_words()}); largest {top or 'none measured'}"]

    def bounds_words(self) -> str:
        return (f"data.max_skew {self.max_skew:g} and {CHANCE_SDS:g}x what a random split of "
                "these sizes gives")

    def to_dict(self) -> dict:
        return {"rule": self.rule, "rule_words": self.rule_words, "rows": self.rows,
                "label": self.label, "max_skew": self.max_skew,
                "columns": [{**dataclasses.asdict(s), "beyond": s.beyond} for s in self.skews]}


def _smd(a: _Column, b: _Column) -> tuple[float, float] | None:
    if a.n < 2 or b.n < 2:
        return None
    (ma, va), (mb, vb) = a.mean_var(), b.mean_var()
    pooled = math.sqrt((va + vb) / 2)
    if pooled == 0:
        return None
    return abs(ma - mb) / pooled, math.sqrt(1 / a.n + 1 / b.n)


def _shares(column: _Column) -> dict:
    counts = dict(column.counts)
    if column.missing:
        counts[None] = column.missing
    total = sum(counts.values()) or 1
    return {k: v / total for k, v in counts.items()}


def _linf(a: _Column, b: _Column, rows: tuple[int, int]) -> tuple[float, float, str] | None:
    if a.counts is None or b.counts is None:
        return None
    p, q = _shares(a), _shares(b)
    values = set(p) | set(q)
    if len(values) < 2:
        return None
    value = max(values, key=lambda v: abs(p.get(v, 0.0) - q.get(v, 0.0)))
    score = abs(p.get(value, 0.0) - q.get(value, 0.0))
    pooled = (p.get(value, 0.0) * rows[0] + q.get(value, 0.0) * rows[1]) / max(sum(rows), 1)
    chance = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / max(rows[0], 1) + 1 / max(rows[1], 1)))
    return score, chance, "missing" if value is None else str(value)


def measure(tally: Tally, types: dict[str, str], roles: dict, label: str, task: str,
            max_skew: float) -> SkewCheck:
    """Each measured column's skew between the first two splits (train, eval)."""
    train, evaluation = tally.columns[0], tally.columns[1]
    rows = (tally.rows[0], tally.rows[1])
    # A group key is wholly on one side by design: not measured.
    measured = [label] + [c for c, r in roles.items() if r.role in (FEATURE, CONSTANT)
                          and c not in tally.rule.by]
    skews = []
    for name in measured:
        bound = float(max_skew)
        text = types[name] == csv_format.STRING or (name == label and task == CLASSIFICATION)
        if text:
            found = _linf(train[name], evaluation[name], rows)
            if found:
                skews.append(Skew(name, "L-inf", found[0], found[1], bound, found[2]))
        else:
            found = _smd(train[name], evaluation[name])
            if found:
                skews.append(Skew(name, "SMD", found[0], found[1], bound))
    label_skews = [s for s in skews if s.column == label]
    features = sorted((s for s in skews if s.column != label), key=lambda s: -s.score)
    by_split = {}
    for split, columns in zip(SPLITS, (train, evaluation)):
        column = columns[label]
        if task == CLASSIFICATION and column.counts is not None:
            shares = _shares(column)
            by_split[split] = {str(k): v for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}
        elif column.numeric and column.n:
            mean, var = column.mean_var()
            by_split[split] = {"mean": mean, "std": math.sqrt(var)}
    return SkewCheck(tally.rule.to_dict(), tally.rule.words(), dict(zip(SPLITS, rows)), by_split,
                     tuple(label_skews + features), max_skew)


def refuse_beyond(check: SkewCheck) -> None:
    """Raises SkewError naming the columns skewed beyond the bound."""
    empty = [split for split, rows in check.rows.items() if not rows]
    if empty:
        raise SkewError(f"the split {check.rule_words} puts no row in {', '.join(empty)} "
                        "(too few groups in data.split_by, or too few rows)")
    beyond = [s for s in check.skews if s.beyond]
    if beyond:
        raise SkewError(
            f"the train and eval rows differ past both bounds ({check.bounds_words()}): "
            + "; ".join(s.words() for s in beyond)
            + f" (split {check.rule_words}; {_advice(check)}, or data.max_skew = 0 to skip)")


def _advice(check: SkewCheck) -> str:
    """What to change, for the split this config has: a group split (data.split_by set) puts
    whole groups on each side, so more or other groups, or another draw of them; a split by
    position follows the rows' order, so a group column that keeps related rows together."""
    by = check.rule.get("by") or []
    if by:
        return (f"data.split_by is {list(by)}: too few groups, or groups unlike each other; "
                "split by more or other columns, or draw again with another data.split_seed")
    return ("the rows' order follows something the position split picks up: set data.split_by "
            "to a column that groups related rows, or another data.split_seed")
