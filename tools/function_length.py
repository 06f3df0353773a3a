"""ARCHITECTURE.md's rules, checked: no function in pipeline/, components/ or trainer_module/ is
over MAX_LINES lines (its def to its last line, docstring included), and no module there over
MAX_MODULE_LINES (a longer one holds two jobs: cut it at its seam).

    python tools/function_length.py

prints `file:line: name is N lines` for each function over the bound (and `file: N lines` for each
module) and exits 1; 0 when there is none. The functions in OVER are the ones written before the
rule was checked: each may not grow, and goes from the list when it is split (the tool says when a
listed one fits or is gone).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "components", "trainer_module", "runtime")
MAX_LINES = 75
MAX_MODULE_LINES = 400
# {"file::function": its length when the rule began to be checked}: to be split, never longer.
OVER = {
    "pipeline/definition.py::create_pipeline": 84,
    "trainer_module/scaling.py::make_plan": 79,
    "pipeline/data_check.py::check": 76,
}


def lengths(root: Path = REPO) -> dict[str, tuple[int, int]]:
    """{"file::function": (first line, lines)} of every function and method in PACKAGES."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    key = f"{path.relative_to(root).as_posix()}::{node.name}"
                    lines = node.end_lineno - node.lineno + 1
                    if lines > out.get(key, (0, 0))[1]:
                        out[key] = (node.lineno, lines)
    return out


def problems(found: dict[str, tuple[int, int]]) -> list[str]:
    out = []
    for key, (line, lines) in sorted(found.items()):
        path, name = key.split("::")
        allowed = OVER.get(key, MAX_LINES)
        if lines > allowed:
            was = f" (listed at {allowed}: it may not grow)" if key in OVER else ""
            out.append(f"{path}:{line}: {name} is {lines} lines, over {MAX_LINES}{was}")
    for key in OVER:
        if found.get(key, (0, 0))[1] <= MAX_LINES:
            out.append(f"{key}: listed in tools/function_length.py OVER but now fits in "
                       f"{MAX_LINES} lines (or is gone): take it off the list")
    return out


def module_problems(root: Path = REPO) -> list[str]:
    """Each module of PACKAGES over MAX_MODULE_LINES lines."""
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > MAX_MODULE_LINES:
                out.append(f"{path.relative_to(root).as_posix()}: {lines} lines, over "
                           f"{MAX_MODULE_LINES}: a module of two jobs, to cut at its seam")
    return out


def main() -> int:
    found = problems(lengths()) + module_problems()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
