"""The wall's symbols (components/compat/, each module's SYMBOLS) checked against other versions
of the dependencies from their source, without installing them: where a version cannot be
installed here (docs/upgrading.md: ml-metadata 1.21 ships manylinux_2_39 wheels only), this says
which symbols an upgrade moves. tests/test_compat.py is the same check on the installed versions.

    pip download --no-deps -d wheels tfx==1.21.0 tensorflow-model-analysis==0.52.0 \\
        tensorflow-transform==1.21.0 tfx-bsl==1.21.0 kfp==2.16.0
    for wheel in wheels/*.whl; do unzip -qo "$wheel" -d unpacked; done
    python tools/upgrade_check.py unpacked

prints one line per symbol (ok, or what moved) and exits 1 when any moved.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import private_names as lint  # noqa: E402  (this script's own directory)
from components import compat  # noqa: E402
from components.compat.symbols import Symbol, not_read, reads  # noqa: E402


def _version(package: str, root: Path) -> str:
    found = sorted(root.glob(f"{package}-*.dist-info"))
    return found[-1].name[len(package) + 1:-len(".dist-info")] if found else "(not unpacked)"


def _top_level(statements: list[ast.stmt]) -> set[str]:
    """The names a module binds at its top level (under if/try too)."""
    names = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _top_level(node.body + node.orelse
                                + [s for h in getattr(node, "handlers", []) for s in h.body])
    return names


def problem(symbol: Symbol, root: Path) -> str:
    """As components.compat.symbols.problem, from the sources unpacked under root."""
    installed = _version(symbol.package, root)
    moved = f"{symbol.package} {installed} no longer has {symbol}"
    found = lint.module_source(symbol.module)
    first, *rest = symbol.name.split(".")
    if found is None or first not in _top_level(found[0].body):
        return moved
    if rest and rest[0] not in lint.class_names(f"{symbol.module}.{first}"):
        return moved
    reader = lint.module_source(symbol.read_by) if symbol.read_by else None
    if symbol.read_by and not (reader and reads(reader[0], symbol)):
        return not_read(symbol, installed)
    return ""


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python tools/upgrade_check.py DIR  (the candidate versions' wheels, "
              "unpacked into DIR)", file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    lint.roots[:] = [str(root)]
    moved = 0
    for _, name, _ in pkgutil.iter_modules(compat.__path__):
        for symbol in getattr(importlib.import_module(f"components.compat.{name}"), "SYMBOLS", ()):
            found = problem(symbol, root)
            moved += bool(found)
            print(f"{name}: {found or f'ok {symbol.package} {symbol}'}")
    print(f"upgrade_check: {moved} of the wall's symbols moved", file=sys.stderr)
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
