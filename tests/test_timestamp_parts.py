"""The transform graph reads timestamps (one pattern) into the same parts as Python's calendar:
ISO-like cells, dates as people write them in either order, seconds since 1970 (the roles that
send a column here: tests/unit/test_column_roles.py)."""

import datetime
import os

import pytest


def test_timestamp_parts_in_the_graph_equal_pythons_calendar():
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from trainer_module import timestamp_parts

    cells = ["2013-01-01T10:00:00Z", "1969-12-31", "2024/02/29 23:59", "1900-01-01",
             "2000-03-01 05:15:30.25+02:00", "not a date", ""]
    parts, present = timestamp_parts.parts(tf.constant([[c] for c in cells]))
    for i, cell in enumerate(cells[:5]):
        date = datetime.date(int(cell[:4]), int(cell[5:7]), int(cell[8:10]))
        hour = int(cell[11:13]) if len(cell) > 10 else 0
        got = [int(parts[p][i]) for p in ("year", "month", "day", "day_of_week", "hour")]
        assert got == [date.year, date.month, date.day, date.weekday(), hour], cell
        assert present[i] == 1.0
    assert present.numpy()[5:].tolist() == [0.0, 0.0]  # not a timestamp: a missing value


# Dates as people write them: (cell, the order the column is read in, its date and hour).
WRITTEN = [
    ("1/31/2017 06:00 AM", "mdy", (2017, 1, 31, 6)),
    ("12/25/2016 12:00 AM", "mdy", (2016, 12, 25, 0)),
    ("7/4/2020 11:59 PM", "mdy", (2020, 7, 4, 23)),
    ("9/30/1990 0:00:00", "mdy", (1990, 9, 30, 0)),
    ("2/3/2017 12:30 PM", "mdy", (2017, 2, 3, 12)),
    ("31.01.17", "dmy", (2017, 1, 31, 0)),
    ("03-02-69 14:05", "dmy", (2069, 2, 3, 14)),
    ("25/12/1970", "dmy", (1970, 12, 25, 0)),
    ("Jan 5, 2017", "mdy", (2017, 1, 5, 0)),
    ("September 3rd, 2019 5:30 p.m.", "mdy", (2019, 9, 3, 17)),
    ("Feb 29 2024", "mdy", (2024, 2, 29, 0)),
    ("5 January 2017", "dmy", (2017, 1, 5, 0)),
    ("28-Feb-1999", "dmy", (1999, 2, 28, 0)),
]


@pytest.mark.parametrize("order", ["mdy", "dmy"])
def test_written_dates_in_the_graph_equal_pythons_calendar(order):
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from trainer_module import timestamp_parts

    cases = [case for case in WRITTEN if case[1] == order]
    cells = [cell for cell, _, _ in cases] + ["13/13/2020", "not a date", "2017-01-05", ""]
    parts, present = timestamp_parts.parts(tf.constant([[c] for c in cells]), order)
    for i, (cell, _, (year, month, day, hour)) in enumerate(cases):
        got = [int(parts[p][i]) for p in ("year", "month", "day", "day_of_week", "hour")]
        assert got == [year, month, day, datetime.date(year, month, day).weekday(), hour], cell
        assert present[i] == 1.0, cell
    assert present.numpy()[len(cases):].tolist() == [0.0] * 4  # not a date: a missing value


def test_seconds_since_1970_in_the_graph_equal_pythons_calendar():
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from trainer_module import timestamp_parts

    seconds = [0, 1_700_000_000, -86_401, 951_782_400 + 3600 * 13 + 59, 4_102_444_799]
    parts, present = timestamp_parts.parts(tf.constant([[s] for s in seconds],
                                                                tf.int64), "epoch")
    for i, value in enumerate(seconds):
        when = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=value)
        got = [int(parts[p][i]) for p in ("year", "month", "day", "day_of_week", "hour")]
        assert got == [when.year, when.month, when.day, when.weekday(), when.hour], value
    assert present.numpy().tolist() == [1.0] * len(seconds)
