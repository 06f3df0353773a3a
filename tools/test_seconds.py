"""Writes tests/test_seconds.json, the seconds each test took, from a whole suite's JUnit XML
(`pytest --junitxml=run.xml tests`): tests/conftest.py hands the longest work to workers first.

usage: python tools/test_seconds.py run.xml"""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def seconds_by_test(junit: str) -> dict[str, float]:
    """{pytest node id: seconds (setup, call and teardown)}; JUnit names a test by its dotted
    module (tests.x, tests.unit.x), a class in it if any, and its name."""
    seconds = {}
    for case in ET.parse(junit).iter("testcase"):
        parts = case.get("classname", "").split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a file
            if (REPO / ("/".join(parts[:cut]) + ".py")).exists():
                nodeid = "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], case.get("name")])
                seconds[nodeid] = round(seconds.get(nodeid, 0) + float(case.get("time") or 0), 2)
                break
    return dict(sorted(seconds.items()))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    figures = seconds_by_test(sys.argv[1])
    (REPO / "tests" / "test_seconds.json").write_text(json.dumps(figures, indent=0) + "\n")
    print(f"tests/test_seconds.json: {len(figures)} tests, {sum(figures.values()):.0f} s together")
