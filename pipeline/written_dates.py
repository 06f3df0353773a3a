"""Whether a text column holds dates, and the order its numeric dates are written in, read from
its cells batch by batch (Arrow's regular expressions, no Python per row): every present cell an
ISO 8601 date or date-time (`features.TIMESTAMP_PATTERN`), or a date as people write it, all
cells in one of `features.DATE_FORMS` (1/31/2017 06:00 AM, 31.01.17, Jan 5, 2017, 5 January
2017). A first field above 12 makes a numeric date day/month/year, a second field above 12
month/day/year; when no field settles it, month/day/year, and the reason says so.
pipeline/column_roles.py makes the column a timestamp from what this finds.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from trainer_module.features import DATE_FORMS, DMY, EPOCH, MDY, TIMESTAMP_PATTERN, YMD

ORDER_WORDS = {YMD: "year-month-day", MDY: "month/day/year", DMY: "day/month/year",
               EPOCH: "seconds since 1970"}
_PARTS = "parsed into year, month, day, day of week, hour"


class WrittenDates:
    """Fed a text column's present values, batch by batch."""

    def __init__(self):
        self.iso = True  # every present cell so far matched TIMESTAMP_PATTERN
        self.forms = set(DATE_FORMS)  # the written date forms every present cell matched so far
        self.fields = [0, 0]  # the largest first and second fields of a numeric date

    def add(self, present: pa.Array) -> None:
        if self.iso:
            self.iso = bool(pc.all(pc.match_substring_regex(present, TIMESTAMP_PATTERN)).as_py())
        for form in sorted(self.forms):
            if not pc.all(pc.match_substring_regex(present, DATE_FORMS[form])).as_py():
                self.forms.discard(form)
        if "numeric" in self.forms:
            found = pc.extract_regex(present, r"^(?P<a>[0-9]{1,2})[-/.](?P<b>[0-9]{1,2})")
            for i, field in enumerate(("a", "b")):
                largest = pc.max(pc.cast(found.field(field), pa.int64())).as_py()
                self.fields[i] = max(self.fields[i], largest or 0)

    def found(self) -> tuple[str, str] | None:
        """(order, why) when every present cell was a date in one form; None otherwise."""
        if self.iso:
            return YMD, "every cell an ISO 8601 date or time: " + _PARTS
        if "month_name_first" in self.forms:
            return MDY, f"every cell a date with the month's name first: {_PARTS}"
        if "day_first_month_name" in self.forms:
            return DMY, f"every cell a date, the day then the month's name: {_PARTS}"
        if not self.forms:
            return None
        first, second = self.fields
        if first > 12 and second > 12:
            return None  # two fields above 12: no date
        if first > 12:
            return DMY, (f"every cell a date, read day/month/year (a first field of {first}, "
                         f"above 12): {_PARTS}")
        if second > 12:
            return MDY, (f"every cell a date, read month/day/year (a second field of {second}, "
                         f"above 12): {_PARTS}")
        return MDY, ("every cell a date, read month/day/year: NOT SETTLED by the data (no field "
                     "above 12; data.columns = {col = \"timestamp:dmy\"} reads day/month/year): "
                     + _PARTS)
