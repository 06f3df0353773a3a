"""A sample of a table's rows by what they hold (components/row_sample.py): the same rows give
the same sample in any order and any chunking, text and numbers and missing cells all count,
and it is spread over the table like a random one."""

import numpy as np
import pyarrow as pa

from components import row_sample


def _table(rows: int, seed: int = 0) -> dict[str, pa.ChunkedArray]:
    rng = np.random.default_rng(seed)
    words = np.array(["", "a", "ab", "JFK", "LGA", "a much longer value, with bytes é"], object)
    text = words[rng.integers(0, len(words), rows)].tolist()
    text[::7] = [None] * len(text[::7])
    numbers = rng.normal(size=rows)
    counts = rng.integers(0, 5, rows)
    return {"text": pa.chunked_array([pa.array(text, pa.string())]),
            "number": pa.chunked_array([pa.array(numbers, mask=(np.arange(rows) % 5 == 0))]),
            "count": pa.chunked_array([pa.array(counts, pa.int64())])}


def _hashes(cells: dict[str, pa.ChunkedArray], rows: int) -> np.ndarray:
    return row_sample.with_copies(row_sample.content_hashes(
        ((name, cells[name]) for name in ("text", "number", "count")), rows))


def test_a_rows_hash_is_its_cells_whatever_its_place_and_chunks():
    cells = _table(5_000)
    hashes = _hashes(cells, 5_000)
    order = np.random.default_rng(1).permutation(5_000)
    shuffled = {name: pa.chunked_array(column.take(pa.array(order[:1_234])).chunks
                                       + column.take(pa.array(order[1_234:])).chunks)
                for name, column in cells.items()}
    moved = _hashes(shuffled, 5_000)
    np.testing.assert_array_equal(np.sort(moved), np.sort(hashes))  # copies of a row trade theirs
    keys = list(zip(*(cells[name].to_pylist() for name in ("text", "number", "count"))))
    once = np.array([keys.count(key) == 1 for key in keys])
    np.testing.assert_array_equal(moved[once[order]], hashes[order][once[order]])
    # Every cell counts: one changed byte, one number, one missing cell change the row's hash.
    first = {name: column.slice(1, 1) for name, column in cells.items()}  # no cell missing
    for name, other in (("text", pa.array(["JFL"])), ("count", pa.array([99], pa.int64())),
                        ("number", pa.array([None], pa.float64()))):
        changed = dict(first, **{name: pa.chunked_array([other])})
        assert _hashes(changed, 1)[0] != _hashes(first, 1)[0], name
    # Rows repeat where a number is missing; each copy has a hash of its own.
    distinct = set(zip(*(cells[name].to_pylist() for name in ("text", "number", "count"))))
    assert len(np.unique(hashes)) == 5_000 > len(distinct)


def test_the_sample_is_the_same_rows_in_any_order_spread_over_the_table():
    cells = _table(20_000, seed=2)
    candidates, hashes = np.arange(0, 20_000), _hashes(cells, 20_000)
    picked = row_sample.smallest(candidates, hashes, 2_000)
    assert len(picked) == 2_000 and np.all(np.diff(picked) > 0)
    # Spread like a random sample: each tenth of the table holds about a tenth of it.
    assert np.all(np.abs(np.bincount(picked // 2_000, minlength=10) - 200) < 60)
    order = np.random.default_rng(3).permutation(20_000)
    moved = {name: column.take(pa.array(order)) for name, column in cells.items()}
    moved_hashes = _hashes(moved, 20_000)
    again = row_sample.smallest(candidates, moved_hashes, 2_000)
    # The same rows, by what they hold (of a row's copies, any is the row).
    np.testing.assert_array_equal(np.sort(moved_hashes[again]), np.sort(hashes[picked]))
    rows = list(zip(*(cells[name].to_pylist() for name in ("text", "number", "count"))))
    assert (sorted((rows[i] for i in order[again]), key=repr)
            == sorted((rows[i] for i in picked), key=repr))
    few = row_sample.smallest(candidates[:100], hashes[:100], 2_000)
    np.testing.assert_array_equal(few, candidates[:100])


def test_a_table_of_repeated_rows_is_sampled_with_its_copies_as_a_random_sample_is():
    """Ten copies of 2,000 rows: a sample of 2,000 holds about 1,300 of the 2,000, as a random
    one would (2,000 x (1 - 0.9**10)), not 200 of them ten times each."""
    base = _table(2_000, seed=4)
    cells = {name: pa.chunked_array(column.chunks * 10) for name, column in base.items()}
    hashes = _hashes(cells, 20_000)
    picked = row_sample.smallest(np.arange(20_000), hashes, 2_000)
    distinct_rows = len(set((picked % 2_000).tolist()))
    assert 1_200 < distinct_rows < 1_400, distinct_rows


def test_the_canonical_order_sorts_by_every_column_in_turn():
    cells = {"a": pa.chunked_array([pa.array([2, 1, 2, 1])]),
             "b": pa.chunked_array([pa.array(["x", "y", "w", "a"])])}
    assert row_sample.canonical_order(cells).tolist() == [3, 1, 2, 0]


def test_a_files_column_order_and_a_column_it_lacks_leave_the_hashes_as_they_are():
    cells = _table(300, seed=5)
    forward = row_sample.content_hashes(cells.items(), 300)
    backward = row_sample.content_hashes(reversed(list(cells.items())), 300)
    np.testing.assert_array_equal(forward, backward)
    empty = {**cells, "text": pa.chunked_array([pa.nulls(300, pa.string())])}
    lacking = {name: column for name, column in cells.items() if name != "text"}
    np.testing.assert_array_equal(row_sample.content_hashes(empty.items(), 300),
                                  row_sample.content_hashes(lacking.items(), 300))
