"""A timestamp column's parts (trainer_module/features.py, TIMESTAMP_PARTS: year, month, day,
day of the week, hour) as numbers, in the graph: ISO 8601 text, a date as people write it in the
column's order, or seconds since 1970 (features.ORDERS); a cell that is missing or not a
timestamp is not present."""

from __future__ import annotations

import tensorflow as tf

from trainer_module import cells, features


def parts(x, order: str = features.YMD) -> tuple[dict, tf.Tensor]:
    """({part: float [batch]}, present [batch]) of a timestamp column read in `order`
    (features.ORDERS): ISO 8601 text, dates as people write them, or seconds since 1970."""
    if order == features.EPOCH:
        seconds = cells.dense(cells.as_float(x) if x.dtype != tf.int64 else x, 0)
        seconds = tf.cast(tf.math.floor(tf.cast(seconds, tf.float64)), tf.int64)
        year, month, day = _civil_from_days(tf.math.floordiv(seconds, 86400))
        hour = tf.math.floordiv(tf.math.floormod(seconds, 86400), 3600)
        return _parts(year, month, day, hour, cells.present(x))
    text = cells.dense(x, "")
    if order == features.YMD:
        valid = tf.strings.regex_full_match(text, features.TIMESTAMP_PATTERN)
        text = tf.where(valid, text, "1970-01-01")
        # A date alone is at midnight: every cell then has its hour at [11, 13).
        text = tf.where(tf.strings.length(text) >= 13, text, tf.strings.substr(text, 0, 10) + "T00")
        number = lambda start, length: tf.strings.to_number(  # noqa: E731 - four uses below
            tf.strings.substr(text, start, length), tf.int64)
        year, month, day, hour = number(0, 4), number(5, 2), number(8, 2), number(11, 2)
        return _parts(year, month, day, hour, cells.present(x) * tf.cast(valid, tf.float32))
    return _written_date_parts(x, text, order)


def _written_date_parts(x, text, order: str) -> tuple[dict, tf.Tensor]:
    """A date as people write it (features.DATE_FORMS): month names become numbers, the digits
    are read as fields in the column's order (month/day/year or day/month/year), then the hour;
    12 AM is 0, 1 PM is 13; a two-digit year is 19xx from 70 on, else 20xx."""
    valid = tf.strings.regex_full_match(text, features.ANY_DATE_FORM)
    lowered = tf.strings.lower(tf.where(valid, text, "1/1/1970"))
    pm = tf.strings.regex_full_match(lowered, r".*[0-9] ?p\.?m\.?$")
    am = tf.strings.regex_full_match(lowered, r".*[0-9] ?a\.?m\.?$")
    lowered = tf.strings.regex_replace(lowered, r"([0-9])(st|nd|rd|th)", r"\1")
    for number, month in enumerate(features.MONTHS, start=1):
        lowered = tf.strings.regex_replace(lowered, month + r"[a-z]*\.?", f" {number} ")
    digits = tf.strings.strip(tf.strings.regex_replace(lowered, r"[^0-9]+", " "))
    fields = tf.strings.to_number(tf.strings.split(digits), tf.int64).to_tensor(
        default_value=0, shape=[None, 4])
    first, second, year, hour = tf.unstack(fields, axis=1)
    if order == features.DMY:
        day, month = first, second
    else:
        month, day = first, second
    year = tf.where(year < 100, year + tf.where(year < 70, tf.constant(2000, tf.int64), 1900), year)
    hour = tf.where(pm & (hour < 12), hour + 12, tf.where(am & (hour == 12), tf.zeros_like(hour), hour))
    valid &= (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31) & (hour <= 23)
    return _parts(year, month, day, hour, cells.present(x) * tf.cast(valid, tf.float32))


def _civil_from_days(days):
    """(year, month, day) of days since 1970-01-01, proleptic Gregorian (civil_from_days)."""
    z = days + 719468
    era = tf.math.floordiv(z, 146097)
    day_of_era = z - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524
                   - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted + 2) // 5 + 1
    month = tf.where(shifted < 10, shifted + 3, shifted - 9)
    year = year_of_era + era * 400 + tf.cast(month <= 2, tf.int64)
    return year, month, day


def _parts(year, month, day, hour, present) -> tuple[dict, tf.Tensor]:
    """The parts of each row's date and hour, and whether it has one (present [batch])."""
    # Days since 1970-01-01 (a Thursday) by the proleptic Gregorian calendar (days_from_civil).
    y = year - tf.cast(month <= 2, tf.int64)
    era = tf.math.floordiv(y, 400)
    year_of_era = y - era * 400
    day_of_year = (153 * (month + tf.where(month > 2, tf.constant(-3, tf.int64), 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146097 + day_of_era - 719468
    parts = {"year": year, "month": month, "day": day,
             "day_of_week": tf.math.floormod(days + 3, 7), "hour": hour}  # 0: Monday
    return {p: tf.cast(parts[p], tf.float32) for p in features.TIMESTAMP_PARTS}, present
