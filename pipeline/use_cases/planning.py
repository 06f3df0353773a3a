"""`lockstep plan`: the training plan (batch, steps, learning rate, accumulation) for TPU slices,
replica counts or the config's GPU machines (trainer.gpu_machines), side by side, from the config's
trainer settings and, where the steps come from
the data, the training split's rows (trainer_module/scaling.py holds the rules).

It trains nothing, writes nothing and loads no TensorFlow; the only data it reads is data.path's
rows, and only when the plan needs them and none were given.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pipeline.config import Config, ConfigError
from trainer_module.settings import PARAMETER_SERVER

if TYPE_CHECKING:
    from trainer_module.scaling import Plan


@dataclasses.dataclass(frozen=True)
class Size:
    """One size to plan for: a label, its replicas, whether they are TPU cores, the hosts that
    feed them (a multi-host slice's, or GPU machines), what a replica is ("gpu", or "" for the
    default), and a header line to print above its plan ("" for none)."""

    label: str
    replicas: int
    on_tpu: bool
    hosts: int = 1
    hardware: str = ""
    header: str = ""
    accumulation: int = 0  # 0: the config's; a fallback's: what keeps the first size's batch
    memory: int = 0  # a replica's bytes (a TPU chip's HBM, a GPU's); 0: not known, not checked

    @property
    def splits_tables(self) -> bool:
        """Whether the run splits its large tables over these replicas: MirroredStrategy and
        MultiWorkerMirroredStrategy, not a TPU's (trainer_module/build.py, table_shards)."""
        return not self.on_tpu and self.replicas > 1


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
    headers: dict[str, str] = dataclasses.field(default_factory=dict)  # a line above a plan
    table_lines: list[str] = dataclasses.field(default_factory=list)  # the embedding tables


class TablesTooLarge(ConfigError):
    """A size's replicas cannot hold the model's embedding tables; the message names the size,
    the table and the setting that would fit it."""


def plan(config: Config, *, slices: list[str] | None = None, replicas: int | None = None,
         like: str | None = None, rows: int | None = None, tables: bool = False) -> Planned:
    """The training plan for each size asked for.

    Args:
      slices: TPU slice presets; replicas: a replica count (default: the config's own size).
      like: a larger TPU slice each size rehearses, by accumulating the micro-batches that make
        its global batch (so learning rate and steps) that slice's.
      rows: the training split's rows (default: counted in data.path, when the plan needs them).
      tables: read data.path for the built-in model's embedding tables (as it is read anyway
        when the plan counts its rows): each table's rows and bytes, whole or split, per size.
    Returns:
      the Planned plans.
    Raises:
      SizeError: an unknown slice, or sizes that cannot rehearse `like`, which one named.
      ConfigError: a replica or row count below 1; CsvError: data.path, when it is read.
      TablesTooLarge: a size's replicas cannot hold the tables.
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
    data = _data(config) if tables or (rows is None and scaling.needs_rows(config.trainer)) \
        else None
    count, rows_line = train_rows(config, rows, data)
    table_lines = table_plan_lines(config, data.table_rows, sizes + ([larger] if larger else [])) \
        if data is not None and not config.trainer.model else []
    try:
        plans = plans_for(config, sizes, count, larger)
        headers = {s.label: f"{s.header}; per-machine batch {p.host_batch}"
                   for s, (_, p) in zip(sizes, plans) if s.header}
        return Planned(plans, rows_line, headers, table_lines)
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
        return [(s.label, scaling.make_plan(
            dataclasses.replace(config.trainer, accumulation_steps=s.accumulation)
            if s.accumulation else config.trainer, s.replicas, s.on_tpu, rows,
            hardware=s.hardware, hosts=s.hosts)) for s in sizes]
    plans = []
    for s in sizes + [like]:
        trainer = dataclasses.replace(config.trainer,
                                      accumulation_steps=scaling.like(s.replicas, like.replicas))
        plans.append((s.label, scaling.make_plan(trainer, s.replicas, s.on_tpu, rows,
                                                 hardware=s.hardware, hosts=s.hosts)))
    return plans


def sizes_for(config: Config, slices: list[str] | None = None,
              replicas: int | None = None) -> list[Size]:
    """The sizes asked for: TPU slice presets, a replica count, or else the config's own (its
    GPU machines, and each fallback count, when it has them).

    Raises:
      ConfigError: a replica count below 1, GPU machines that name no GPUs; SliceError: an
        unknown slice, named.
    """
    from trainer_module import slices as slices_lib

    if replicas is not None:
        if replicas < 1:
            raise ConfigError(f"replicas must be at least 1, got {replicas}")
        return [Size(f"{replicas} replicas", replicas, False)]
    if config.trainer.gpu_machines and not slices:
        return gpu_sizes(config)
    names = slices or ([config.trainer.tpu_slice] if config.trainer.tpu_slice else [])
    if names:
        return [Size(s.name, s.replicas, True, s.hosts, memory=slices_lib.replica_bytes(s))
                for s in map(slices_lib.get, names)]
    count = max(config.trainer.emulate_replicas, 1)
    return [Size(f"{count} replica(s)", count, False)]


def gpu_sizes(config: Config) -> list[Size]:
    """The config's GPU machines (trainer.gpu_machines), then each of
    trainer.fallback_gpu_machines: a machine an input pipeline (a host), its GPUs its replicas.

    Raises:
      ConfigError: a machine type that names no GPUs, without trainer.gpu_accelerator and
        trainer.gpus_per_machine.
    """
    from components.gpu_machines import GPU_GIB, GpuMachines, GpuMachinesError

    sizes, first = [], config.trainer.gpu_machines
    for count in [first, *config.trainer.fallback_gpu_machines]:
        try:
            machines = GpuMachines.of(config.trainer, count, check=False)
        except GpuMachinesError as err:
            raise ConfigError(str(err)) from None
        workers = f"a chief and {count - 1} worker{'s' * (count != 2)}" if count > 1 else "a chief"
        sizes.append(Size(machines.name, machines.replicas, False, count, "gpu",
                          f"GPU machines {machines.describe()}: {workers}" + (
                              "; trainer.fallback_gpu_machines" if sizes else ""),
                          first * config.trainer.accumulation_steps // count if sizes else 0,
                          GPU_GIB.get(machines.accelerator, 0) << 30))
    return sizes


def _data(config: Config):
    from pipeline import data_check

    return data_check.check(config.data)


def _server_line(config: Config, table_rows: dict[str, int]) -> str:
    """What each parameter server holds of the tables: split over trainer.ps_servers past
    trainer.shard_embeddings_over (trainer_module/build.py, table_shards), else each whole on
    one server."""
    from trainer_module import table_plan

    dim, over = config.trainer.embedding_dim, config.trainer.shard_embeddings_over
    servers = config.trainer.ps_servers
    tables = [table_plan.Table(feature, rows, dim, table_plan.shards_for(rows, dim, servers, over),
                               holders="parameter servers")
              for feature, rows in table_rows.items()]
    split = [t for t in tables if t.blocks > 1]
    whole = [t for t in tables if t.blocks == 1]
    share = sum(t.replica_bytes for t in split)
    return (f"  {servers} parameter server(s): {table_plan.megabytes(share)} a server of the split "
            f"tables ({', '.join(t.feature for t in split) or 'none'}), and the {len(whole)} "
            f"whole ones ({table_plan.megabytes(sum(t.bytes for t in whole))}) placed one to a "
            "server in turn")


def table_plan_lines(config: Config, table_rows: dict[str, int], sizes: list[Size]) -> list[str]:
    """What the built-in model's embedding tables take, per size: each table's rows and bytes
    with Adam's slots, and a replica's share, whole or split over the replicas
    (trainer_module/table_plan.py).

    Raises:
      TablesTooLarge: a size whose replica memory is known and smaller than its share, naming
        the largest table and the setting that would fit it.
    """
    from trainer_module import table_plan

    dim, over = config.trainer.embedding_dim, config.trainer.shard_embeddings_over
    holders = ("the parameter servers" if config.trainer.strategy == PARAMETER_SERVER
               else "GPU or CPU replicas")
    lines = [f"Embedding tables (x {dim}, Adam's slots with each; split over {holders} "
             f"past trainer.shard_embeddings_over, {table_plan.megabytes(over)}):"
             if over >= 0 else f"Embedding tables (x {dim}, Adam's slots with each; never split):"]
    for feature, rows in sorted(table_rows.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {feature}: {rows:,} rows, {table_plan.megabytes(table_plan.table_bytes(rows, dim))}")
    if config.trainer.strategy == PARAMETER_SERVER:  # asynchronous: split over the servers
        return lines + [_server_line(config, table_rows)]
    for size in sizes:
        tables = [table_plan.Table(feature, rows, dim, table_plan.shards_for(
            rows, dim, size.replicas, over) if size.splits_tables else 1)
            for feature, rows in table_rows.items()]
        share = sum(t.replica_bytes for t in tables)
        split = [t.feature for t in tables if t.blocks > 1]
        room = f" of {size.memory / (1 << 30):.0f} GiB" if size.memory else ""
        lines.append(f"  {size.label}: {table_plan.megabytes(share)} a replica{room}"
                     + (f" ({', '.join(split)} split over the replicas)" if split else ""))
        if size.memory and share > size.memory:
            largest = max(tables, key=lambda t: t.replica_bytes)
            fits = size.memory // 2 // (dim * table_plan.BYTES * (1 + table_plan.SLOTS))
            raise TablesTooLarge(
                f"{size.label}: the embedding tables take {table_plan.megabytes(share)} a replica, "
                f"more than its {size.memory / (1 << 30):.0f} GiB; the largest, "
                f"{largest.words()}: data.max_vocabulary = {fits:,} would fit it in half a "
                "replica" + ("" if size.splits_tables else
                             ", or train on GPU or CPU replicas, which split it "
                             "(trainer.shard_embeddings_over)"))
    return lines


def train_rows(config: Config, rows: int | None = None, data=None) -> tuple[int | None, str]:
    """The training split's rows when the steps or the batch come from the data, and where that
    came from: `rows` if given, else counted in data.path (its check `data`, when read already)
    times the train split's share of the buckets.

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
    data = data or _data(config)
    train, evaluation = config.data.train_buckets, config.data.eval_buckets
    count = data.rows * train // (train + evaluation)
    return count, (f"Training rows: about {count} ({train} of {train + evaluation} hash buckets "
                   f"of the {data.rows} rows in {config.data.path})")
