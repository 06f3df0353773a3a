"""trainer_module/table_plan.py: which tables are split over the replicas, what each costs."""

from trainer_module import table_plan


def test_a_table_is_split_only_past_its_bytes_with_adams_slots():
    """trainer.shard_embeddings_over: the bytes of the rows and Adam's two slots."""
    assert table_plan.table_bytes(1_000_000, 16) == 192_000_000
    assert table_plan.shards_for(1_000_000, 16, 8, 64 << 20) == 8
    assert table_plan.shards_for(200_001, 16, 8, 64 << 20) == 1  # 38 MB: mirrored
    assert table_plan.shards_for(10, 4, 8, 0) == 8  # 0: always
    assert table_plan.shards_for(10 ** 8, 16, 8, -1) == 1  # -1: never
    assert table_plan.shards_for(10 ** 8, 16, 1, 0) == 1  # one replica: nothing to split
    assert table_plan.shards_for(3, 4, 8, 0) == 3  # a row or more a block


def test_blocks_differ_by_at_most_one_row_and_cover_the_table():
    assert table_plan.block_sizes(997, 4) == [250, 249, 249, 249]
    assert table_plan.block_sizes(8, 8) == [1] * 8
    assert sum(table_plan.block_sizes(10_000_019, 8)) == 10_000_019


def test_a_table_says_what_each_replica_holds():
    split = table_plan.Table("user_xf", 1_000_000, 16, 8)
    assert split.replica_bytes == 24_000_000
    assert split.words() == ("user_xf: 1,000,000 rows x 16, 192.0 MB with Adam's slots, split "
                             "over 8 replicas: 24.0 MB each")
    assert table_plan.Table("k_xf", 6, 8).words().endswith("whole on every replica")


def test_the_model_sizes_a_large_columns_table_with_its_hash_buckets():
    """hooks.ModelInputs.categorical: a large text column (hashed prefix) and a large integer
    column's code (kept_codes prefix) get their kept values plus the hash buckets; a code as
    usual, plus the one OOV bucket."""
    import types

    from trainer_module import features, hooks

    int64 = types.SimpleNamespace(dtype=types.SimpleNamespace(is_integer=True, is_floating=False))
    spec = {"user_xf": int64, "item_code": int64, "n_code": int64}
    sizes = {features.hashed_vocab_name("user"): 10, features.kept_codes_name("item"): 20,
             features.code_vocab_name("n"): 5}
    inputs = hooks.ModelInputs(spec, sizes, "classification", 2, None)
    assert inputs.categorical == {"user_xf": 10 + features.HASH_BUCKETS,
                                  "item_code": 20 + features.HASH_BUCKETS,
                                  "n_code": 5 + features.OOV_BUCKETS}
