"""The import order holds in the code itself, imports inside functions included: no module of
lockstep's three packages reaches itself through another's imports (a cycle hidden in a function
still loads half-made modules and couples what the layers keep apart), and trainer_module's
layers are the ones `make lint` checks (pyproject.toml, import-linter)."""

import ast
from pathlib import Path

from conftest import REPO

PACKAGES = ("pipeline", "components", "trainer_module", "runtime")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}


def imports(path: Path, known: set[str], name: str) -> set[str]:
    """The project's modules that `path` (module `name`) imports anywhere in its body, functions
    included."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1],
                                 *([base] if base else [])])
            # `from a import b`: module a.b where b is one, else a itself.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                     for alias in node.names]
        else:
            continue
        for imported in names:
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                found.add(imported)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: imports(path, set(modules), name) for name, path in modules.items()}


def test_no_module_reaches_itself_through_imports_in_functions_or_not():
    assert cycles(_graph()) == []


def test_the_cycle_finder_finds_one_made_through_a_function_level_import(tmp_path):
    first = tmp_path / "a.py"
    first.write_text("def f():\n    from pkg import b\n")
    second = tmp_path / "b.py"
    second.write_text("import pkg.a\n")
    graph = {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    found = {name: imports(path, {"pkg", "pkg.a", "pkg.b"}, name) for name, path in
             (("pkg.a", first), ("pkg.b", second))}
    assert found == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}


def test_no_two_modules_share_a_name():
    """One name for one thing: `config.py` in two packages was two different things."""
    names: dict[str, list[str]] = {}
    for name in _modules():
        leaf = name.rpartition(".")[2]
        if name not in PACKAGES and not (REPO / name.replace(".", "/")).is_dir():
            names.setdefault(leaf, []).append(name)
    assert {leaf: found for leaf, found in names.items() if len(found) > 1} == {}
