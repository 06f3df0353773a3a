"""Column roles are read from the data before the run: ids and constants left out, timestamps
parsed into parts; `data.columns` overrides them; the transform graph reads the same timestamps
(one pattern) into the same parts as Python's calendar."""

import datetime
import os

import numpy as np
import pytest

from pipeline import data_check
from pipeline.config import DataConfig
from trainer_module.config import CONSTANT, FEATURE, ID, TIMESTAMP


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
    ({"rownum": "index"}, "data.columns.rownum: the role must be feature, id, constant or "
                          "timestamp, got 'index'"),
    ({"amount": "timestamp"}, "data.columns.amount: a timestamp column holds ISO 8601 text, "
                              "and 'amount' is float"),
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


def test_timestamp_parts_in_the_graph_equal_pythons_calendar():
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from trainer_module import preprocessing

    cells = ["2013-01-01T10:00:00Z", "1969-12-31", "2024/02/29 23:59", "1900-01-01",
             "2000-03-01 05:15:30.25+02:00", "not a date", ""]
    parts, present = preprocessing._timestamp_parts(tf.constant([[c] for c in cells]))
    for i, cell in enumerate(cells[:5]):
        date = datetime.date(int(cell[:4]), int(cell[5:7]), int(cell[8:10]))
        hour = int(cell[11:13]) if len(cell) > 10 else 0
        got = [int(parts[p][i]) for p in ("year", "month", "day", "day_of_week", "hour")]
        assert got == [date.year, date.month, date.day, date.weekday(), hour], cell
        assert present[i] == 1.0
    assert present.numpy()[5:].tolist() == [0.0, 0.0]  # not a timestamp: a missing value


def test_a_label_with_one_value_is_refused(tmp_path):
    (tmp_path / "d.csv").write_text("x,y\n" + "".join(f"{i * 0.5},only\n" for i in range(30)))
    with pytest.raises(data_check.csv_format.CsvError,
                       match="label column 'y' has one value \\('only'\\): there is nothing to "
                             "classify"):
        data_check.check(DataConfig(str(tmp_path / "d.csv"), "y", [""]))
