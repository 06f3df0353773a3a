"""Column roles are read from the data before the run: ids and constants left out, timestamps
parsed into parts; `data.columns` overrides them (the transform graph reads the timestamps into
the same parts as Python's calendar: tests/test_timestamp_parts.py)."""

import datetime
import os

import numpy as np
import pytest

from pipeline import data_check
from pipeline.config import DataConfig
from pipeline.column_roles import CONSTANT, FEATURE, ID, TIMESTAMP, Role


def _write(path, rows=300, seed=0):
    rng = np.random.default_rng(seed)
    lines = ["rownum,key,amount,price_cents,country,constant,when,day,y"]
    start = datetime.datetime(2021, 3, 1)
    for i in range(rows):
        when = start + datetime.timedelta(hours=int(rng.integers(0, 24 * 400)))
        lines.append(",".join([
            str(1000 + i),  # a sequential key
            f"{rng.integers(0, 2**62):016x}",  # a hash
            f"{rng.normal(50, 10):.6f}",  # a unique measurement (float)
            str(int(rng.integers(0, 10**9))),  # a unique integer that is not a sequence
            ["fr", "de", "it"][i % 3],
            "same",
            when.isoformat() if i % 10 else "NA",  # a timestamp, some missing
            when.strftime("%Y/%m/%d"),
            ["a", "b"][i % 2]]))
    path.write_text("\n".join(lines) + "\n")


def test_roles_are_read_from_the_data(tmp_path):
    _write(tmp_path / "d.csv")
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", ["", "NA"]))
    roles = {name: r.role for name, r in data.roles.items()}
    assert roles == {"rownum": ID, "key": ID, "amount": FEATURE, "price_cents": FEATURE,
                     "country": FEATURE, "constant": CONSTANT, "when": TIMESTAMP,
                     "day": TIMESTAMP}
    assert "a sequence from 1000 to 1299" in data.roles["rownum"].why
    assert "'same'" in data.roles["constant"].why
    assert data.label_counts == {"a": 150, "b": 150}


def test_data_columns_override_the_roles(tmp_path):
    _write(tmp_path / "d.csv")
    data = data_check.check(DataConfig(
        str(tmp_path / "d.csv"), "y", ["", "NA"],
        columns={"rownum": "feature", "when": "feature", "amount": "id"}))
    assert (data.roles["rownum"].role, data.roles["when"].role, data.roles["amount"].role) == (
        FEATURE, FEATURE, ID)
    assert data.roles["rownum"].why == "set by data.columns"


@pytest.mark.parametrize("columns, message", [
    ({"nope": "id"}, "data.columns: 'nope' is not a column of"),
    ({"rownum": "index"}, "data.columns.rownum: the role must be feature, id, constant, hashed "
                          "or timestamp (a timestamp may name its order: timestamp:ymd, "
                          "timestamp:mdy, timestamp:dmy, timestamp:epoch), got 'index'"),
    ({"when": "timestamp:ydm"}, "data.columns.when: the role must be feature"),
    ({"amount": "timestamp"}, "data.columns.amount: a timestamp column holds dates as text "
                              "(or name timestamp:epoch for seconds), and 'amount' is float"),
    ({"when": "timestamp:epoch"}, "data.columns.when: seconds since 1970 are numbers, and "
                                  "'when' holds text"),
    ({"y": "id"}, "data.columns.y: 'y' is the label, not a feature"),
])
def test_a_bad_override_is_one_line_naming_the_column(tmp_path, columns, message):
    _write(tmp_path / "d.csv")
    with pytest.raises(data_check.csv_format.CsvError) as err:
        data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", ["", "NA"], columns=columns))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_table_of_ids_alone_is_refused(tmp_path):
    (tmp_path / "d.csv").write_text("id,k,y\n" + "".join(f"{i},same,{i % 2}\n" for i in range(50)))
    with pytest.raises(data_check.csv_format.CsvError, match="every column but the label is an id "
                                                              "or a constant"):
        data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))


def test_a_label_with_one_value_is_refused(tmp_path):
    (tmp_path / "d.csv").write_text("x,y\n" + "".join(f"{i * 0.5},only\n" for i in range(30)))
    with pytest.raises(data_check.csv_format.CsvError,
                       match="label column 'y' has one value \\('only'\\): there is nothing to "
                             "classify"):
        data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))


def test_the_order_of_a_written_date_is_read_from_the_data(tmp_path):
    rows = ["us,eu,unsettled,named,amount,y"] + [
        f"{m}/{d}/2017 0{h}:15 PM,{d:02d}.{m:02d}.2017,{m}/{h + 1}/2018,\"Mar {d}, 2019\",{i * 0.5},{'ab'[i % 2]}"
        for i, (m, d, h) in enumerate((1 + i % 12, 1 + i % 28, i % 9) for i in range(60))]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", ["", "NA"]))
    assert {k: (r.role, r.order) for k, r in data.roles.items()} == {
        "us": (TIMESTAMP, "mdy"), "eu": (TIMESTAMP, "dmy"), "unsettled": (TIMESTAMP, "mdy"),
        "named": (TIMESTAMP, "mdy"), "amount": (FEATURE, "")}
    assert "a second field of 28, above 12" in data.roles["us"].why
    assert "a first field of 28, above 12" in data.roles["eu"].why
    assert 'NOT SETTLED by the data (no field above 12; data.columns = {col = "timestamp:dmy"}' \
        in data.roles["unsettled"].why
    fixed = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", ["", "NA"],
                                        columns={"unsettled": "timestamp:dmy"}))
    assert (fixed.roles["unsettled"].order, fixed.roles["unsettled"].why) == (
        "dmy", "set by data.columns, read day/month/year")


def test_a_near_unique_text_column_is_left_out_unless_named_hashed(tmp_path):
    """A model learns near-unique text by heart (each value in a row or two): it is left out by
    default, with a line that says how to keep it; named "hashed" in data.columns, its most
    frequent values are kept and the rest hashed."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    rows = ["note,city,y"] + [f"free text {i % 9000},c{i % 7},{'ab'[i % 2]}" for i in range(12000)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))
    assert data.roles["note"].role == "near-unique text" and data.roles["city"].role == FEATURE
    assert "a model would learn them by heart" in data.roles["note"].why
    from pipeline import config as config_lib, preflight

    config = config_lib.load(None, {"data.path": str(tmp_path / "d.csv"), "data.label": "y"})
    decisions = preflight.decide(config, data)
    spec = decisions.transform_spec("y")
    assert spec.hashed == () and "note" in spec.excluded
    assert any(line.startswith("lockstep: columns left out as near-unique text: 'note' (9,000 "
                               "distinct values over 12,000 rows, 67% of them in one row")
               and 'data.columns = {column = "hashed"} keeps it' in line
               for line in decisions.column_lines())
    kept = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""],
                                       columns={"note": "hashed"}))
    assert kept.roles["note"].role == "hashed"
    decisions = preflight.decide(config, kept)
    assert decisions.transform_spec("y").hashed == ("note",)
    assert any(line.startswith("lockstep: columns hashed: 'note' (set by data.columns")
               for line in decisions.column_lines())


def _repeated_ids(path, users: int, times: int, seed=0, integer=False):
    """A CSV whose `user` column holds `users` ids, each in `times` rows spread over the file."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.repeat(np.arange(users), times))
    x = rng.normal(0, 1, len(ids))
    users_text = [str(10_000_000 + i) if integer else f"u{i}" for i in ids]
    lines = ["user,x,y"] + [f"{u},{v:.3f},{'ab'[i % 2]}" for i, (u, v) in
                            enumerate(zip(users_text, x))]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("integer", [False, True])
def test_a_repeated_id_column_is_counted_exactly_and_kept(tmp_path, monkeypatch, integer):
    """30,000 user ids, each in 3 of 90,000 rows spread over many of the check's batches: the
    count is exact (a sum of each batch's distinct values said 2.9x more, and left the column out
    as near-unique text). Past the distinct values a vocabulary keeps as usual (here 20,000), the
    column is a large categorical one: each value seen twice or more kept, the rest hashed."""
    from components import csv_format
    from pipeline import column_roles

    monkeypatch.setattr(csv_format, "BLOCK_BYTES", 64 << 10)  # ~5,000 rows a batch
    monkeypatch.setattr(column_roles, "VOCABULARY_TOP_K", 20_000)
    _repeated_ids(tmp_path / "d.csv", 30_000, 3, integer=integer)
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))
    role = data.roles["user"]
    assert (role.role, role.kept, role.rare) == (FEATURE, 30_000, 0), role
    assert role.why == ("30,000 values seen at least twice over the whole table, 0 rarer ones "
                        "(Transform keeps those the train split repeats; the rest share 1,000 "
                        "hash buckets)")
    assert column_roles.large(data.roles) == ["user"]
    # min_count 4: none is seen that often; max_vocabulary caps what is kept.
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""], min_count=4))
    assert (data.roles["user"].kept, data.roles["user"].rare) == (0, 30_000)
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""], max_vocabulary=1000))
    assert (data.roles["user"].kept, data.roles["user"].rare) == (1000, 29_000)
    assert "the 1,000 most frequent" in data.roles["user"].why


def test_text_whose_values_repeat_is_no_near_unique_text(tmp_path, monkeypatch):
    """6,000 values, each in 2 of 12,000 rows spread over the batches: half the rows distinct,
    but none seen once: a feature, its values learned (near-unique text is most values seen
    once)."""
    from components import csv_format

    monkeypatch.setattr(csv_format, "BLOCK_BYTES", 64 << 10)
    _repeated_ids(tmp_path / "d.csv", 6_000, 2)
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))
    assert data.roles["user"] == Role(FEATURE, "")


def test_a_float_of_few_values_each_in_many_rows_is_also_a_code(tmp_path, monkeypatch):
    """A float column of at most CODE_TOP_K values, CODED_ROWS_PER_VALUE rows each or more
    (loans' interest rate: a grid of rates) is coded, counted exactly over many of the check's
    batches, and its code has a table row per value (a missing cell one more) and the OOV bucket;
    a float of as many values seen fewer times (Wage's logwage), or of more than CODE_TOP_K
    values (whose counting stops: no float is counted past them), is a number only, and
    data.columns = {col = "feature"} keeps a coded one a number only."""
    from components import csv_format
    from pipeline import column_roles
    from trainer_module.features import CODE_TOP_K, OOV_BUCKETS, code_name

    monkeypatch.setattr(csv_format, "BLOCK_BYTES", 16 << 10)  # ~500 rows a batch
    rng = np.random.default_rng(0)
    rows = 12_000
    grid = np.round(5 + 0.25 * rng.integers(0, 60, rows), 2)  # 60 rates, ~200 rows each
    sparse = np.round(rng.integers(0, 300, rows) / 7, 3)  # 300 values, 40 rows each
    wide = rng.normal(0, 1, rows)  # a measurement: every row its own value
    lines = ["rate,sparse,wide,y"] + [
        f"{'' if i % 100 == 0 else g},{s},{w:.6f},{'ab'[i % 2]}"
        for i, (g, s, w) in enumerate(zip(grid, sparse, wide))]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))
    assert data.roles["rate"].role == FEATURE and data.roles["rate"].codes == 60
    assert data.roles["rate"].why == ("60 values, 198 rows each on average, a median 0.25 apart "
                                      "(25 steps of 0.01)")
    assert column_roles.coded(data.roles) == ["rate"]
    from pipeline import config as config_lib, preflight

    config = config_lib.load(None, {"data.path": str(tmp_path / "d.csv"), "data.label": "y"})
    decisions = preflight.decide(config, data)
    assert decisions.transform_spec("y").coded == ("rate",)
    assert ("lockstep: float columns also embedded as codes (data.columns = {column = "
            "\"feature\"} keeps one a number only): 'rate' (60 values, 198 rows each on average, a "
            "median 0.25 apart (25 steps of 0.01))"
            in decisions.column_lines())
    assert data.roles["sparse"] == data.roles["wide"] == Role(FEATURE, "")
    assert data.table_rows[code_name("rate")] == 60 + 1 + OOV_BUCKETS
    assert code_name("sparse") not in data.table_rows
    assert data.roles["rate"].codes <= CODE_TOP_K
    overridden = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""],
                                             columns={"rate": "feature"}))
    assert column_roles.coded(overridden.roles) == []


def test_a_float_that_fills_its_grid_is_a_measurement_not_a_code(tmp_path):
    """A float of few values, each in many rows, whose values fill the grid of the finest
    decimal place they are written to (a weight in hundredths: diamonds' carat; a delay in whole
    minutes written "2.0") is a number only; the same count of values spread over a table of
    levels (rates 0.25 apart, written to the hundredth) is coded."""
    from pipeline import column_roles

    rng = np.random.default_rng(0)
    rows = 12_000
    carat = np.round(0.2 + 0.01 * rng.integers(0, 150, rows), 2)  # 150 hundredths, 80 rows each
    delay = rng.integers(-10, 40, rows).astype(float)  # whole minutes, written "2.0"
    rate = np.round(5 + 0.25 * rng.integers(0, 150, rows), 2)  # 150 levels 25 hundredths apart
    lines = ["carat,delay,rate,y"] + [f"{c},{d},{r},{'ab'[i % 2]}"
                                      for i, (c, d, r) in enumerate(zip(carat, delay, rate))]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))
    assert column_roles.coded(data.roles) == ["rate"]
    assert data.roles["carat"] == data.roles["delay"] == Role(FEATURE, "")
    assert data.roles["rate"].why == ("150 values, 80 rows each on average, a median 0.25 apart "
                                      "(25 steps of 0.01)")


def test_an_integer_codes_table_has_a_row_per_value_as_texts_does(tmp_path):
    """An integer column of more than CODE_TOP_K values (a person id, each in 4 rows) has a
    table row per value and the OOV bucket, as the preprocessing keeps them (up to
    VOCABULARY_TOP_K, a text column's bound); a coded float's stays within CODE_TOP_K."""
    from trainer_module.features import CODE_TOP_K, OOV_BUCKETS, code_name

    values = CODE_TOP_K + 476
    lines = ["person,y"] + [f"{7 + i % values},{'ab'[i % 2]}" for i in range(4 * values)]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    data = data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))
    assert data.roles["person"] == Role(FEATURE, "")
    assert data.table_rows[code_name("person")] == values + OOV_BUCKETS


def test_grid_gap_counts_steps_of_the_finest_decimal_place_written():
    """The median gap between neighbouring values, in steps of the finest decimal place any
    value needs (trailing zeros need none; a step is at most a unit); float32 noise written out
    ("1.7999999523162842") makes its values far apart, as a table of levels is."""
    from decimal import Decimal

    from pipeline.column_roles import CODED_GAP, grid_gap

    assert grid_gap(["0.23", "0.24", "0.26", "0.27"]) == (1.0, Decimal("0.01"))
    assert grid_gap(["2.0", "3.0", "5.0"]) == (1.5, Decimal(1))
    assert grid_gap(["10.0", "20.0", "30.0"]) == (10.0, Decimal(1))
    assert grid_gap(["10.41", "10.9", "11.98"]) == (78.5, Decimal("0.01"))
    assert grid_gap(["1.7999999523162842", "2.0"])[0] > 1e15
    assert grid_gap(["7.5"])[0] == float("inf") and grid_gap([])[0] == float("inf")
    assert grid_gap(["0.23", "0.24", "0.25"])[0] < CODED_GAP <= grid_gap(["5.0", "5.25"])[0]


def test_a_float_column_is_counted_only_while_it_could_be_coded():
    """Batches of few values each, but more than CODE_TOP_K over them all: the counts are
    dropped once the merged ones pass CODE_TOP_K (a float column's memory stays bounded), and
    never for a batch stream that stays within it."""
    import pyarrow as pa

    from pipeline.column_roles import _Column
    from trainer_module.features import CODE_TOP_K

    column, kept = _Column(), _Column()
    for batch in range(40):
        column.add(pa.array([f"{batch}.{i}" for i in range(100)] * 3), floats=True)
        kept.add(pa.array([f"{i}.5" for i in range(0, 300, 3)] * 3), floats=True)
    assert column.values is None and 40 * 100 > CODE_TOP_K
    assert kept.values is not None and len(kept.values.counts()) == 100
    assert kept.role("float").codes == 100
