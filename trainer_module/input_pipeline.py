"""Per-replica input: each input pipeline reads its own shard, parses in parallel, batches by the
per-replica batch with drop_remainder (static shapes, as TPUs need), repeats and prefetches.

Use with `strategy.distribute_datasets_from_function(make_dataset_fn(...))`.
"""

from __future__ import annotations

import tensorflow as tf

from trainer_module import config, features


def list_files(patterns) -> list[str]:
    files = sorted({f for p in ([patterns] if isinstance(patterns, str) else patterns)
                    for f in tf.io.gfile.glob(p)})
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {patterns}")
    return files


def make_dataset_fn(file_patterns, feature_spec: dict, label_key: str, task: str,
                    per_replica_batch: int, *, training: bool, seed: int = 0,
                    skip_steps: int = 0, shuffle_buffer: int = 10_000, cache: bool = False,
                    compression: str = "GZIP"):
    """Returns dataset_fn(input_context) -> per-replica batches of (features, label).

    skip_steps: global steps already trained (to resume there): each pipeline skips the
    per-replica batches it fed them, one per replica it feeds per step.
    """
    files = list_files(file_patterns)
    label_out = features.transformed_name(label_key)

    def parse(record):
        parsed = tf.io.parse_single_example(record, feature_spec)
        label = parsed.pop(label_out)
        return parsed, label

    def has_label(_, label):
        if task == config.REGRESSION:
            return tf.math.is_finite(label)
        return label >= 0

    def dataset_fn(ctx: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        pipelines = ctx.num_input_pipelines if ctx else 1
        pipeline_id = ctx.input_pipeline_id if ctx else 0
        ds = tf.data.Dataset.from_tensor_slices(files)
        if len(files) >= pipelines:
            ds = ds.shard(pipelines, pipeline_id)  # file sharding: each pipeline its own files
            ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=compression),
                               cycle_length=tf.data.AUTOTUNE, num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=True)
        else:
            ds = tf.data.TFRecordDataset(ds, compression_type=compression)
            ds = ds.shard(pipelines, pipeline_id)  # element sharding: fewer files than pipelines
        ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.filter(has_label)
        if training:
            if cache:  # small data: keep parsed examples in memory after the first epoch
                ds = ds.cache()
            ds = ds.shuffle(shuffle_buffer, seed=seed).repeat()
        ds = ds.batch(per_replica_batch, drop_remainder=training)
        if skip_steps:
            replicas_fed = ctx.num_replicas_in_sync // pipelines if ctx else 1
            ds = ds.skip(skip_steps * max(replicas_fed, 1))
        return ds.prefetch(tf.data.AUTOTUNE)

    return dataset_fn
