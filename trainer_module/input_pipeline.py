"""Per-replica input: each input pipeline reads its own shard of the TFRecords, batches the
serialized records, parses whole batches at once (`tf.io.parse_example`, vectorized), applies the
tf.Transform graph to them (the pipeline's Transform analyzes only, so the Trainer reads raw
examples), drops rows without a label with one mask per batch, rebatches to the per-replica batch
with drop_remainder (static shapes, as TPUs need), repeats and prefetches. No op runs per example
but the shuffle. Training data that fits (`CACHE_MAX_FILE_BYTES`) is parsed once and kept in
memory as parsed chunks (one step each, or `CACHE_CHUNK_STEPS` from `CACHE_CHUNK_MIN_FILE_BYTES`
up), and each epoch reshuffles the chunks (benchmarks/trainer_throughput.py: the loop runs at
0.99 of its speed on one in-memory batch); larger data streams from its files every epoch. The
target statistics' pass before the first step reads those chunks (`InputFn.once`), so the fit
rows are parsed once for it and for training (flights: the Trainer 18.5 -> 16.6 s).
tf.data's autotuning is off (`untuned`): nothing here needs it, and it cost cores and a wait.

Use with `strategy.distribute_datasets_from_function(make_dataset_fn(...))`.
"""

from __future__ import annotations

import hashlib
import json

import tensorflow as tf

from trainer_module import autograph_rules, features, settings
from trainer_module.autograph_rules import plain

autograph_rules.install()  # the transform layer unconverted in the traced dataset map


# Cache the training records in memory when their files (GZIP) add up to at most this: kept
# parsed and transformed, they take about twice their compressed size (1M rows x 24 columns: 102 MB
# of GZIP, 0.2 GB of RAM), so this is about 1 GB of RAM at most.
CACHE_MAX_FILE_BYTES = 512 << 20
CACHED_STEP_SHUFFLE = 1024  # cached steps shuffled per epoch
# Training files of at least this size are cached in chunks of CACHE_CHUNK_STEPS steps: a few
# large tensors rather than one small tensor per column per step (1M rows: the Trainer's peak RSS
# 0.19 GB lower, as fast). Each epoch reshuffles the chunks, so smaller data, with few chunks,
# keeps one step per chunk and so a new order of steps every epoch.
CACHE_CHUNK_STEPS = 32
CACHE_CHUNK_MIN_FILE_BYTES = 16 << 20


def untuned() -> tf.data.Options:
    """The options every dataset here ends with: tf.data's autotuning off.

    Nothing here needs tuning. The parse is one op per batch and the transform a few per batch,
    so the default parallelism of an AUTOTUNE map or interleave without the tuner, min(16, the
    cores), is enough; the prefetch's buffer still grows as it empties (its own, older autotuner);
    what fits in memory is read once. The tuner itself costs three ways:
    - its model thread takes a share of the cores the parse needs: on one core (the bundled
      data's run) training ran at 8,500 to 11,000 examples/s with it, 12,000 to 12,600 without;
    - in TensorFlow 2.16 an iterator's destruction waits for that thread's next wake-up, which
      is not woken, holding the GIL: the Trainer's closing collection (components/memory.py)
      took 2.5 s in 2 of 3 runs on one core, 0.1 s without; early stopping makes and drops an
      iterator of the validation rows at each score;
    - the per-device iterators of a synchronous strategy had the same wait, worse
      (trainer_module/strategy.py, quiet_device_iterators).
    On 2 cores and 2 replicas, streaming from files, the loop's speed was the same either way
    (benchmarks/trainer_throughput.py's loop, 3 rounds each)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def file_bytes(files: list[str]) -> int:
    """Their sizes added up (a stat per file: a request each on an object store)."""
    return sum(tf.io.gfile.stat(f).length for f in files)


# Beside a split dir (Split-train.rows): how many records the ExampleGen wrote to it
# (components/csv_example_gen.py), so the plan need not read every record to count them.
ROWS_SUFFIX = ".rows"


def _recorded(patterns, suffix: str) -> list[str] | None:
    """The text of what the ExampleGen wrote beside each split dir these `<dir>/*` patterns glob
    (`<dir><suffix>`), or None where any of them has none (another ExampleGen, an older run, a
    pattern that takes part of a dir)."""
    texts = []
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        path = pattern[:-2] + suffix if pattern.endswith("/*") else ""
        if not path or not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as handle:
            texts.append(handle.read())
    return texts


def recorded_rows(patterns) -> int | None:
    """The records the ExampleGen counted as it wrote the split dirs these `<dir>/*` patterns
    glob, or None where any of them has no count: then count_records reads them."""
    texts = _recorded(patterns, ROWS_SUFFIX)
    return None if texts is None else sum(int(text) for text in texts)


# Beside a split dir (Split-train.identities): JSON, {"version", "files": [[file name, source file,
# read start, first row, rows, digest], ...]}, each file the ExampleGen wrote in the order of its
# first row's identity (components/csv_example_gen.py, _finalize): the rows of each file named by
# where they come from, and the digest of their decoded columns.
IDENTITIES_SUFFIX = ".identities"
IDENTITIES_VERSION = 1


def recorded_identities(patterns) -> list | None:
    """The row identities the ExampleGen recorded for the split dirs these `<dir>/*` patterns glob
    (as recorded_rows), or None where any of them has none, or has them in another version."""
    texts = _recorded(patterns, IDENTITIES_SUFFIX)
    recorded = [json.loads(text) for text in texts or ()]
    if texts is None or any(r.get("version") != IDENTITIES_VERSION for r in recorded):
        return None
    return [row for r in recorded for row in r["files"]]


def fingerprint(patterns, **order) -> str:
    """The training input's fingerprint: a digest of the rows' identities, file by file in the
    order the Trainer lists them (each file's rows by where they came from, and the digest of
    their values), and of what orders them and carves the validation part out of them (`order`:
    the seed, the validation share, the global batch, ...). The input pipeline is a function of
    these alone, so two runs with one fingerprint read the same rows in the same order and hold
    out the same validation rows. Where the ExampleGen recorded no identities (another
    ExampleGen), the files' names and sizes stand in for them, and the fingerprint says so with
    a "~" (GZIP's bytes differ between runs of the same data: the records' features are
    serialized in no fixed order)."""
    identities = recorded_identities(patterns)
    if identities is None:
        rows = [[f.rsplit("/", 1)[-1], tf.io.gfile.stat(f).length] for f in list_files(patterns)]
    else:
        rows = sorted(identities)  # list_files' order: by name
    what = {"rows": rows, "order": order, "part_buckets": PART_BUCKETS,
            "read": [READ_BLOCK, READ_CYCLE]}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    return digest if identities is not None else f"~{digest}"


# Each file's reader hands over READ_BLOCK records at a time, READ_CYCLE files read side by side.
# A parallel interleave of single records costs a hand-over between threads per record: 240k
# records (26 MB of GZIP) took 4.1-4.3 s to read that way on 2 cores, 0.5-0.6 s in blocks of 256,
# shuffled all the same. A fixed cycle, not AUTOTUNE's (the core count), keeps the order of the
# records the same on every machine.
READ_BLOCK = 256
READ_CYCLE = 8


# The train split's parts: the rows the model fits ("fit") and the validation rows that pick the
# best checkpoint and stop training (trainer_module/early_stopping.py), carved by a hash of each
# record's file name and place in its file: the same rows in every run and for any replica
# count (a hash of the serialized record would not do: a tf.Example's map of features is not
# serialized in one order).
ALL, FIT, VALIDATION = "all", "fit", "validation"
PART_BUCKETS = 1000


def in_validation(names: tf.Tensor, places: tf.Tensor, share: float) -> tf.Tensor:
    """[n] bool: which records (their file's name, their places in it) are validation rows,
    `share` of them."""
    keys = tf.strings.join([names, tf.strings.as_string(places)], ":")
    return tf.strings.to_hash_bucket_fast(keys, PART_BUCKETS) < int(round(share * PART_BUCKETS))


def _keep(part: str, share: float):
    """(file name, places) -> [n] bool mask of the part's records (None: keep all)."""
    if part == ALL or share <= 0:
        return None
    if part == VALIDATION:
        return lambda name, places: in_validation(name, places, share)
    return lambda name, places: tf.logical_not(in_validation(name, places, share))


def _record_blocks(files: tf.data.Dataset, compression: str, block: int,
                   keep=None) -> tf.data.Dataset:
    """Blocks of up to `block` serialized records, READ_CYCLE files read side by side (keep:
    which records of a block to keep, from their file's name and places in it)."""
    return files.interleave(plain(lambda f: _file_blocks(f, compression, block, keep)),
                            cycle_length=READ_CYCLE, num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)


def _file_blocks(file, compression: str, block: int, keep=None) -> tf.data.Dataset:
    blocks = tf.data.TFRecordDataset(file, compression_type=compression).batch(block)
    if keep is None:
        return blocks
    name = tf.strings.regex_replace(file, r"^.*/", "")
    return blocks.enumerate().map(plain(lambda i, records: tf.boolean_mask(records, keep(
        name, i * block + tf.range(tf.size(records, out_type=tf.int64))))))


def read_records(files: tf.data.Dataset, compression: str, keep=None) -> tf.data.Dataset:
    """The serialized records of these files, READ_CYCLE files at a time in blocks of READ_BLOCK
    (keep: a mask of each block's records, from their file's name and places in it)."""
    return _record_blocks(files, compression, READ_BLOCK, keep).unbatch()


def count_records(files: list[str], compression: str = "GZIP") -> int:
    """The records in these TFRecord files, counted in C++ a block at a time."""
    ds = _record_blocks(tf.data.Dataset.from_tensor_slices(files), compression, 8192)
    return int(ds.reduce(tf.constant(0, tf.int64),
                         plain(lambda n, batch: n + tf.shape(batch, out_type=tf.int64)[0])))


def list_files(patterns) -> list[str]:
    files = sorted({f for p in ([patterns] if isinstance(patterns, str) else patterns)
                    for f in tf.io.gfile.glob(p)})
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {patterns}")
    return files


def caching(files: list[str], cache: bool | None = None, chunk_steps: int | None = None
            ) -> tuple[bool, int | None]:
    """(cache the training records in memory, steps per cached chunk), from their files' sizes
    (one stat per file) where not given: what make_dataset_fn does with training input."""
    if cache is None or (cache and chunk_steps is None):
        size = file_bytes(files)
        cache = size <= CACHE_MAX_FILE_BYTES if cache is None else cache
        if cache and chunk_steps is None:
            chunk_steps = CACHE_CHUNK_STEPS if size >= CACHE_CHUNK_MIN_FILE_BYTES else 1
    return cache, chunk_steps if cache else None


def _labeled(parsed: dict, label: tf.Tensor, keep: tf.Tensor):
    """(features, label) of the rows `keep` marks, each feature by one gather at their places (a
    boolean_mask a feature traced ten ops each: 2 s of each trace of a 53-column table's map).
    Called from parse_batch, traced as written (no decorator here: the Kubeflow compile imports
    this module with TensorFlow's stand-ins)."""
    rows = tf.reshape(tf.where(keep), [-1])
    return {k: tf.gather(v, rows) for k, v in parsed.items()}, tf.gather(label, rows)


def traced_once(transform):
    """The transform layer (tft's TransformFeaturesLayer) as one function for every input
    pipeline that applies it: a TF1 transform graph is pruned into a function each time the
    layer is called in a trace (0.7 s on a 53-column table), and the train, validation and eval
    maps each traced it. Traced once here, on the parsed batch's spec (the same in each map:
    batches of unknown size), each map calls that function."""
    return tf.function(transform, autograph=False, reduce_retracing=True)


def make_dataset_fn(file_patterns, feature_spec: dict, label_key: str, task: str,
                    per_replica_batch: int, *, training: bool, seed: int | None = 0,
                    skip_steps: int = 0, shuffle_buffer: int = 10_000, cache: bool | None = None,
                    chunk_steps: int | None = None, compression: str = "GZIP", transform=None,
                    part: str = ALL, validation_share: float = 0.0, global_order: bool = False):
    """Returns dataset_fn(input_context) -> per-replica batches of (features, label) (an
    InputFn; its `once` gives the rows of the training input's first epoch, each once).

    global_order: with several input pipelines, each reads every record in the one order a
    single pipeline would, batches it by the global step's batch and keeps its own slice of each
    (trainer.input_order = "global"): the examples of every global step are then the same for
    any number of pipelines (an elastic resume on other hosts), at the cost of each reading
    every record. Without it each reads its own share of the files.

    part: ALL the split's records, or its FIT or VALIDATION part (`validation_share` of them).

    skip_steps: global steps already trained (to resume there): each pipeline skips the
    per-replica batches it fed them, one per replica it feeds per step.
    seed: the shuffle's; None: one from the clock where the dataset is made, so each worker of an
    asynchronous run (trainer_module/parameter_server.py), which cannot be told apart from the
    others and reads the whole split, reads it in an order of its own.
    """
    return InputFn(file_patterns, feature_spec, label_key, task, per_replica_batch,
                   training=training, seed=seed, skip_steps=skip_steps,
                   shuffle_buffer=shuffle_buffer, cache=cache, chunk_steps=chunk_steps,
                   compression=compression, transform=transform, part=part,
                   validation_share=validation_share, global_order=global_order)


class InputFn:
    """make_dataset_fn's dataset_fn, its arguments kept. A training input kept in memory is
    parsed once into chunks (`parsed`); for a single pipeline with a fixed seed those chunks
    are one dataset (`one_pipeline`), so that whoever reads it first to its end fills the cache
    that every later reader reads: the target statistics' pass (`once`) and then training."""

    def __init__(self, file_patterns, feature_spec: dict, label_key: str, task: str,
                 per_replica_batch: int, *, training: bool, seed: int | None, skip_steps: int,
                 shuffle_buffer: int, cache: bool | None, chunk_steps: int | None,
                 compression: str, transform, part: str, validation_share: float,
                 global_order: bool):
        self.files = list_files(file_patterns)
        self.feature_spec, self.task, self.transform = feature_spec, task, transform
        self.label_out = features.transformed_name(label_key)
        self.per_replica_batch, self.training, self.seed = per_replica_batch, training, seed
        self.skip_steps, self.shuffle_buffer, self.compression = skip_steps, shuffle_buffer, compression
        self.part, self.validation_share, self.global_order = part, validation_share, global_order
        self.cache, self.chunk_steps = (caching(self.files, cache, chunk_steps) if training
                                        else (cache, chunk_steps))
        self.shared = {}  # unit -> one_pipeline's chunks
        # Traced as written (trainer_module/autograph_rules.py); decorated here, not where the
        # class is defined: the Kubeflow compile imports this module with TensorFlow's stand-ins.
        self.parse_batch = plain(self._parse_batch)

    def _parse_batch(self, records):
        parsed = tf.io.parse_example(records, self.feature_spec)
        if self.transform is not None:
            parsed = self.transform(parsed)
        label = parsed.pop(self.label_out)
        keep = tf.math.is_finite(label) if self.task == settings.REGRESSION else label >= 0
        return _labeled(parsed, label, keep)

    def parsed(self, records: tf.data.Dataset, unit: int, shuffle_seed) -> tf.data.Dataset:
        """The records shuffled, parsed chunk_steps steps' worth at a time, kept in memory (the
        training input's epochs cut and reshuffle these chunks; cutting them into steps before
        the cache made every later slice a sub-buffer that tf.data logs an error for, and
        unbatch().batch() is slow)."""
        ds = records.shuffle(self.shuffle_buffer, seed=shuffle_seed)
        ds = ds.batch(unit * self.chunk_steps)
        return ds.map(self.parse_batch, num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=True).cache()

    def one_pipeline(self, unit: int) -> tf.data.Dataset:
        """The chunks of a single pipeline (every file) at this unit, one dataset for every
        call: its in-memory cache, filled by whichever reads it first to its end, is read by
        all that come after."""
        if unit not in self.shared:
            records = read_records(tf.data.Dataset.from_tensor_slices(self.files),
                                   self.compression, _keep(self.part, self.validation_share))
            self.shared[unit] = self.parsed(records, unit, self.seed)
        return self.shared[unit]

    def once(self, replicas: int, pipelines: int = 1) -> tf.data.Dataset | None:
        """Every row of the part once, as the training input's first epoch parses them into
        memory for one pipeline feeding `replicas` (None where the input is not kept so: it
        streams, several pipelines read it, or the shuffle's seed is the clock's). Read to its
        end, it is that input's cache: the target statistics' pass (build.fill_statistics)
        parses the rows for training too."""
        if not (self.training and self.cache and self.seed is not None and pipelines == 1):
            return None
        return self.one_pipeline(self.per_replica_batch * replicas).with_options(untuned())

    def __call__(self, ctx: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        seed = self.seed
        shuffle_seed = seed if seed is not None else (
            tf.cast(tf.timestamp() * 1e6, tf.int64) % (2**31 - 1))
        pipelines = ctx.num_input_pipelines if ctx else 1
        pipeline_id = ctx.input_pipeline_id if ctx else 0
        files, compression = self.files, self.compression
        ds = tf.data.Dataset.from_tensor_slices(files)
        keep = _keep(self.part, self.validation_share)
        whole = self.global_order and pipelines > 1  # this pipeline reads the global order
        if whole:
            ds = read_records(ds, compression, keep)
        elif len(files) >= pipelines:
            ds = ds.shard(pipelines, pipeline_id)  # file sharding: each pipeline its own files
            ds = read_records(ds, compression, keep)
        else:
            ds = ds.flat_map(plain(lambda f: _file_blocks(f, compression, READ_BLOCK, keep)))
            ds = ds.unbatch()
            ds = ds.shard(pipelines, pipeline_id)  # element sharding: fewer files than pipelines
        # The unit of batching is what this pipeline feeds one global step (the per-replica
        # batch times the replicas it feeds; global_order: the whole global step's): the data
        # order is then the same for any replica count, which the one-device equivalence and an
        # elastic resume need; rebatch cuts it per replica.
        replicas_fed = max(ctx.num_replicas_in_sync // pipelines, 1) if ctx else 1
        share = self.per_replica_batch * replicas_fed  # what this pipeline feeds a global step
        unit = share * pipelines if whole else share
        if self.training and self.cache:  # parsed once, each epoch reshuffles the chunks
            ds = (self.one_pipeline(unit) if pipelines == 1 and seed is not None
                  else self.parsed(ds, unit, shuffle_seed))
            ds = ds.shuffle(max(CACHED_STEP_SHUFFLE // self.chunk_steps, 16), seed=shuffle_seed)
            ds = ds.repeat()
        else:
            if self.training:
                ds = ds.shuffle(self.shuffle_buffer, seed=shuffle_seed).repeat()
            ds = ds.batch(unit)
            ds = ds.map(self.parse_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if whole:  # each global step's batch, then this pipeline's slice of it
            start = pipeline_id * share
            ds = ds.rebatch(unit, drop_remainder=True).map(
                plain(lambda x, y: tf.nest.map_structure(lambda t: t[start:start + share], (x, y))))
        ds = ds.rebatch(self.per_replica_batch, drop_remainder=self.training)
        if self.skip_steps:
            ds = ds.skip(self.skip_steps * replicas_fed)
        return ds.prefetch(tf.data.AUTOTUNE).with_options(untuned())
