"""tools/function_length.py, ARCHITECTURE.md's "no function over 75 lines", checked: the tree
passes; a function planted over the bound is named at its line; a listed one may not grow, and
one that fits is to come off the list."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("function_length",
                                                  REPO / "tools" / "function_length.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tool = _tool()


def test_the_tree_keeps_the_rule():
    assert tool.problems(tool.lengths()) == []


def _plant(root: Path, lines: int, name: str = "long", where: str = "pipeline/planted.py"):
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
    path.write_text(f"import os\n\n\ndef {name}():\n{body}    return 0\n")


def test_a_function_over_the_bound_is_named_at_its_line(tmp_path):
    for package in tool.PACKAGES:
        (tmp_path / package).mkdir()
    _plant(tmp_path, 75, "fits")
    _plant(tmp_path, 76, "long", "components/long.py")
    found = tool.lengths(tmp_path)
    assert found["pipeline/planted.py::fits"] == (4, 75)
    said = [p for p in tool.problems(found) if "long.py" in p]
    assert said == ["components/long.py:4: long is 76 lines, over 75"]


def test_a_listed_function_may_not_grow_and_leaves_the_list_once_it_fits(tmp_path):
    key, allowed = next(iter(tool.OVER.items()))
    found = {k: (1, v) for k, v in tool.OVER.items()}
    assert tool.problems(found) == []
    found[key] = (1, allowed + 1)
    assert tool.problems(found) == [
        f"{key.replace('::', ':1: ')} is {allowed + 1} lines, over 75 (listed at {allowed}: "
        "it may not grow)"]
    found[key] = (1, 60)
    assert tool.problems(found) == [
        f"{key}: listed in tools/function_length.py OVER but now fits in 75 lines (or is "
        "gone): take it off the list"]


def test_a_module_over_its_bound_is_named_and_the_tree_keeps_it(tmp_path):
    assert tool.module_problems() == []
    for package in tool.PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "pipeline" / "fits.py").write_text("x = 1\n" * tool.MAX_MODULE_LINES)
    (tmp_path / "components" / "long.py").write_text("x = 1\n" * (tool.MAX_MODULE_LINES + 1))
    found = tool.module_problems(tmp_path)
    assert len(found) == 1 and found[0].startswith(
        f"components/long.py: {tool.MAX_MODULE_LINES + 1} lines"), found
