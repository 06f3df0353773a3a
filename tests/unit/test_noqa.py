"""ARCHITECTURE.md's rule that each `# noqa` in the packages says why, checked; ruff's RUF100
(pyproject.toml) removes one that suppresses nothing."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"#\s*noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(.*)$")


def test_every_noqa_in_the_packages_says_why():
    silent = []
    for package in ("pipeline", "components", "trainer_module", "runtime"):
        for path in sorted((REPO / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                found = MARKER.search(line)
                if found and not re.search(r"[a-zA-Z]", found.group(1)):
                    silent.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not silent, "a # noqa without its reason:\n" + "\n".join(silent)
