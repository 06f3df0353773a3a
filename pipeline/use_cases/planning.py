"""`lockstep plan`: the training plan (batch, steps, learning rate, accumulation) for TPU slices or
replica counts, side by side, from the config's trainer settings and, where the steps come from
the data, the training split's rows (trainer_module/scaling.py holds the rules).

It trains nothing, writes nothing and loads no TensorFlow; the only data it reads is data.path's
rows, and only when the plan needs them and none were given.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pipeline.config import Config, ConfigError

if TYPE_CHECKING:
    from trainer_module.scaling import Plan


@dataclasses.dataclass(frozen=True)
class Size:
    """One size to plan for: a label, its replicas, whether they are TPU cores, and the hosts
    that feed them (a multi-host slice's)."""

    label: str
    replicas: int
    on_tpu: bool
    hosts: int = 1


class SizeError(ConfigError):
    """A size asked for cannot be planned. `which`: "slice" (one of the slices) or "like" (the
    larger slice to rehearse); `name`: that slice, where the message does not name it."""

    def __init__(self, which: str, message: str, name: str = ""):
        super().__init__(message)
        self.which, self.name = which, name


@dataclasses.dataclass(frozen=True)
class Planned:
    """The plans, [(label, scaling.Plan)] in the order asked (the rehearsed size last), and where
    the training rows came from ("" when the plan needs none)."""

    plans: list[tuple[str, Plan]]
    rows_line: str = ""


def plan(config: Config, *, slices: list[str] | None = None, replicas: int | None = None,
         like: str | None = None, rows: int | None = None) -> Planned:
    """The training plan for each size asked for.

    Args:
      slices: TPU slice presets; replicas: a replica count (default: the config's own size).
      like: a larger TPU slice each size rehearses, by accumulating the micro-batches that make
        its global batch (so learning rate and steps) that slice's.
      rows: the training split's rows (default: counted in data.path, when the plan needs them).
    Returns:
      the Planned plans.
    Raises:
      SizeError: an unknown slice, or sizes that cannot rehearse `like`, which one named.
      ConfigError: a replica or row count below 1; CsvError: data.path, when it is read.
    """
    from trainer_module import scaling, slices as slices_lib

    try:
        sizes = sizes_for(config, slices, replicas)
    except slices_lib.SliceError as err:
        raise SizeError("slice", str(err)) from None
    try:
        larger = sizes_for(config, [like])[0] if like else None
    except slices_lib.SliceError as err:
        raise SizeError("like", str(err)) from None
    count, rows_line = train_rows(config, rows)
    try:
        return Planned(plans_for(config, sizes, count, larger), rows_line)
    except scaling.ScalingError as err:
        if larger is None:
            raise
        raise SizeError("like", str(err), name=like) from None


def plans_for(config: Config, sizes: list[Size], rows: int | None = None,
              like: Size | None = None) -> list[tuple[str, Plan]]:
    """The training plan for each size, from the config's trainer settings.

    Args:
      sizes: what to plan for (sizes_for()); rows: the training split's rows when the steps
        come from the data (train_rows()).
      like: a larger size each of `sizes` rehearses: each accumulates the micro-batches that make
        its global batch (so learning rate and steps) the larger one's, which comes last.
    Returns:
      [(label, scaling.Plan)], in the order of `sizes` (then `like`).
    Raises:
      scaling.ScalingError: `like`'s replicas are not a multiple of a size's.
    """
    from trainer_module import scaling

    if like is None:
        return [(s.label, scaling.make_plan(config.trainer, s.replicas, s.on_tpu, rows,
                                            hosts=s.hosts)) for s in sizes]
    plans = []
    for s in sizes + [like]:
        trainer = dataclasses.replace(config.trainer,
                                      accumulation_steps=scaling.like(s.replicas, like.replicas))
        plans.append((s.label, scaling.make_plan(trainer, s.replicas, s.on_tpu, rows,
                                                 hosts=s.hosts)))
    return plans


def sizes_for(config: Config, slices: list[str] | None = None,
              replicas: int | None = None) -> list[Size]:
    """The sizes asked for: TPU slice presets, a replica count, or else the config's own.

    Raises:
      ConfigError: a replica count below 1; SliceError: an unknown slice, named.
    """
    from trainer_module import slices as slices_lib

    if replicas is not None:
        if replicas < 1:
            raise ConfigError(f"replicas must be at least 1, got {replicas}")
        return [Size(f"{replicas} replicas", replicas, False)]
    names = slices or ([config.trainer.tpu_slice] if config.trainer.tpu_slice else [])
    if names:
        return [Size(s.name, s.replicas, True, s.hosts) for s in map(slices_lib.get, names)]
    count = max(config.trainer.emulate_replicas, 1)
    return [Size(f"{count} replica(s)", count, False)]


def train_rows(config: Config, rows: int | None = None) -> tuple[int | None, str]:
    """The training split's rows when the steps or the batch come from the data, and where that
    came from: `rows` if given, else counted in data.path times the train split's share of the
    buckets.

    Raises:
      ConfigError: `rows` below 1; CsvError: data.path, when it is read.
    """
    from trainer_module import scaling

    if not scaling.needs_rows(config.trainer):
        return None, ""
    if rows is not None:
        if rows < 1:
            raise ConfigError(f"rows must be at least 1, got {rows}")
        return rows, f"Training rows: {rows} (--rows)"
    from pipeline import data_check

    data = data_check.check(config.data)
    train, evaluation = config.data.train_buckets, config.data.eval_buckets
    count = data.rows * train // (train + evaluation)
    return count, (f"Training rows: about {count} ({train} of {train + evaluation} hash buckets "
                   f"of the {data.rows} rows in {config.data.path})")
