"""The split rule (components/row_split.py): repeated rows spread at the bucket ratio, the label
never moves a row, groups stay whole, and a row's split depends on nothing but its place (or its
group) and the seed."""

import numpy as np
import pyarrow as pa
import pytest

from components import row_split


def _batch(rows: int, label=None, user=None) -> pa.RecordBatch:
    """`rows` identical rows (x = 'a'), a label column and a user column."""
    label = label if label is not None else ["yes"] * rows
    user = user if user is not None else [f"u{i % 50}" for i in range(rows)]
    return pa.RecordBatch.from_arrays(
        [pa.array(["a"] * rows), pa.array(label), pa.array(user)], ["x", "label", "user"])


def test_identical_rows_spread_at_the_bucket_ratio():
    rule = row_split.SplitRule((4, 1))
    splits = rule.assign(_batch(20_000), "data.csv", 0, 0)
    assert set(np.unique(splits)) == {0, 1}
    assert abs(np.mean(splits == 1) - 0.2) < 0.015  # binomial sd 0.003: five sds of room
    # TFX's content hash would send all 20,000 identical rows to one side.


def test_the_label_never_moves_a_row():
    rule = row_split.SplitRule((4, 1))
    rng = np.random.default_rng(0)
    yes = rule.assign(_batch(5000), "data.csv", 0, 0)
    noisy = rule.assign(_batch(5000, label=list(rng.choice(["yes", "no"], 5000))), "data.csv", 0, 0)
    np.testing.assert_array_equal(yes, noisy)


def test_a_row_keeps_its_split_whatever_the_batches():
    rule = row_split.SplitRule((2, 1), seed=3)
    whole = rule.assign(_batch(1000), "span-1/part.csv", 128, 0)
    parts = np.concatenate([rule.assign(_batch(300), "span-1/part.csv", 128, 0),
                            rule.assign(_batch(700), "span-1/part.csv", 128, 300)])
    np.testing.assert_array_equal(whole, parts)
    # Another file, another read or another seed: another draw.
    for other in (rule.assign(_batch(1000), "span-1/other.csv", 128, 0),
                  rule.assign(_batch(1000), "span-1/part.csv", 4096, 0),
                  row_split.SplitRule((2, 1), seed=4).assign(_batch(1000), "span-1/part.csv", 128, 0)):
        assert 0.2 < np.mean(whole != other) < 0.7


def test_groups_stay_whole_and_spread_at_the_ratio():
    users = [f"user-{i % 2000}" for i in range(20_000)]
    rule = row_split.SplitRule((4, 1), by=("user",))
    splits = rule.assign(_batch(20_000, user=users), "data.csv", 0, 0)
    by_user = {}
    for user, split in zip(users, splits):
        by_user.setdefault(user, set()).add(int(split))
    assert all(len(s) == 1 for s in by_user.values())
    assert abs(np.mean([s == {1} for s in by_user.values()]) - 0.2) < 0.045
    # The place of a row does not matter for a group key, nor the label.
    again = rule.assign(_batch(20_000, label=["no"] * 20_000, user=users), "moved.csv", 99, 7)
    np.testing.assert_array_equal(splits, again)
    # A missing cell is a group of its own, distinct from any text.
    gaps = rule.assign(_batch(4, user=[None, None, "", "x"]), "data.csv", 0, 0)
    assert gaps[0] == gaps[1]


def test_the_label_or_an_unknown_column_is_no_split_key():
    with pytest.raises(row_split.SplitKeyError, match="the label 'label' can never decide"):
        row_split.check_keys(("user", "label"), "label")
    with pytest.raises(row_split.SplitKeyError,
                       match=r"^d.csv: data.split_by column 'usr' is not in the header"):
        row_split.check_keys(("usr",), "label", ["x", "label", "user"], "d.csv")


def test_the_rule_says_itself():
    assert row_split.SplitRule((4, 1)).words() == (
        "by row position (never by the label), seed 0, train 4 : eval 1 buckets")
    rule = row_split.SplitRule((3, 1), ("user", "day"), 9)
    assert row_split.SplitRule.from_dict(rule.to_dict()) == rule
