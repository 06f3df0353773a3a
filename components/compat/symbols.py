"""What the wall reaches in a dependency, declared (`Symbol`), and whether the installed version
still has it (`problem`): the check an upgrade runs first (tests/test_compat.py)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.metadata
import inspect
import textwrap


@dataclasses.dataclass(frozen=True)
class Symbol:
    """A name in a dependency's module that the wall uses though the dependency does not publish
    it, or rebinds.

    module: the dotted module; name: dotted inside it ("_ComputationsCombineFn", or
    "_CalibrationHistogramCombiner._left": an attribute its instances are given in a method of
    the class or of a base); read_by: for a rebound name, the module that looks it up each time it
    runs (the rebinding takes effect only while it does)."""

    module: str
    name: str
    read_by: str = ""

    @property
    def package(self) -> str:
        return self.module.split(".")[0]

    def __str__(self) -> str:
        inside = self.module.split(".", 1)[1] if "." in self.module else ""
        return f"{inside}.{self.name}" if inside else self.name


def version(package: str) -> str:
    """The installed version of a package ("not installed" without one)."""
    try:
        return importlib.metadata.version(package.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def problem(symbol: Symbol) -> str:
    """"" where the installed dependency still has the symbol (and, for a rebound one, still
    looks it up where `read_by` says); else one line naming the symbol and the version."""
    moved = f"{symbol.package} {version(symbol.package)} no longer has {symbol}"
    try:
        found = importlib.import_module(symbol.module)
    except ImportError:
        return moved
    for part in symbol.name.split("."):
        if hasattr(found, part):
            found = getattr(found, part)
        elif inspect.isclass(found) and _sets_attribute(found, part):
            return ""  # an instance attribute: nothing to walk further
        else:
            return moved
    if symbol.read_by and not reads(
            ast.parse(inspect.getsource(importlib.import_module(symbol.read_by))), symbol):
        return not_read(symbol, version(symbol.package))
    return ""


def not_read(symbol: Symbol, installed: str) -> str:
    return (f"{symbol.package} {installed}: {symbol.read_by} no longer looks up {symbol} when it "
            "runs, so rebinding it changes nothing")


def _sets_attribute(cls: type, name: str) -> bool:
    """Whether a method of `cls` or of a base assigns `self.<name>`."""
    for klass in cls.__mro__:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        if any(isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
               and node.attr == name and isinstance(node.value, ast.Name)
               and node.value.id == "self" for node in ast.walk(tree)):
            return True
    return False


def reads(tree: ast.Module, symbol: Symbol) -> bool:
    """Whether the source of `read_by` (its syntax tree) looks the symbol's first name up at call
    time: as a global of its own module, or as an attribute of the symbol's module imported
    there, or of its package's (`tft_beam.analysis_graph_builder.<name>`)."""
    name = symbol.name.split(".")[0]
    if symbol.read_by == symbol.module:
        return any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
                   for node in ast.walk(tree))
    parent, _, last = symbol.module.rpartition(".")
    aliases = {alias.asname or last for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == parent for alias in node.names if alias.name == last}
    aliases |= {alias.asname for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names if alias.name == symbol.module and alias.asname}
    packages = {alias.asname for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names if alias.name == parent and alias.asname}
    return any(isinstance(node, ast.Attribute) and node.attr == name and (
        isinstance(node.value, ast.Name) and node.value.id in aliases
        or isinstance(node.value, ast.Attribute) and node.value.attr == last
        and isinstance(node.value.value, ast.Name) and node.value.value.id in packages)
        for node in ast.walk(tree))
