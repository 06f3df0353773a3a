"""The lint rule behind the walls: outside components/compat/, no private name of TFX, tfx_bsl,
TFMA, tf.Transform, KFP or ML Metadata is used, and no name of theirs is rebound; outside
trainer_module/tf_internals.py, the same for TensorFlow and tf-keras, whose internal modules
(`tensorflow.python`, `tf.__internal__`, `tf_keras.src`) count as private too.

    python tools/private_names.py [FILE.py ...]     (default: every tracked .py file)

prints `file:line: what` for each use and exits 1; exits 0 when there is none. It reads source
only, theirs included (sys.path), and imports none of them: a second or two. A private name is a
dotted path with a segment that starts with `_` and is not a dunder. It finds:
- an import of a private module or name of theirs;
- a private attribute of a module or class of theirs (`mpv._ComputationsCombineFn`), and one
  named by a string to getattr, hasattr, setattr or delattr;
- in a class derived from one of theirs (lockstep classes in between walked through): a private
  method of theirs overridden, or a private attribute of theirs read or set through self, cls or
  super(); TFX's executor base classes' members for subclasses (EXECUTOR_CONTRACT) excepted;
- on any other object, a private attribute that a class of theirs sets or defines
  (`combiner._left`): matched by name, as the object's type is not known from source;
- a rebinding: an assignment to (or del of) an attribute of a module or class of theirs,
  setattr / monkeypatch.setattr / swapped on one, a (module of theirs, "name", value) triple as a
  table of rebinds holds, or sys.modules["their.module"] replaced.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("tfx", "tfx_bsl", "tensorflow_model_analysis", "tensorflow_transform", "kfp",
            "ml_metadata", "tensorflow", "tf_keras")
WALLS = ("components/compat/", "trainer_module/tf_internals.py")
# TensorFlow's: its internal modules are private, though their names have no underscore; a name
# TensorFlow sets on its objects is matched on an object of unknown type only where no lockstep
# class sets or defines the same name (TensorFlow sets `_process`, `_get`, ... as lockstep does);
# and a compile's stand-in for the whole module in sys.modules (pipeline/kubeflow/import_stubs.py)
# uses none of it.
TENSORFLOW = ("tensorflow", "tf_keras")
INTERNAL = {"tensorflow": ("python", "__internal__"), "tf_keras": ("src",)}
# The members TFX's executor base classes keep for their subclasses (TFX's own executors and its
# custom-executor guide use them through self): allowed in lockstep's executors; the wall's test
# (tests/test_compat.py) checks each is still there.
EXECUTOR_CONTRACT = {
    "tfx.dsl.components.base.base_executor.BaseExecutor": ("_context", "_get_tmp_dir",
                                                           "_log_startup"),
    "tfx.dsl.components.base.base_beam_executor.BaseBeamExecutor": ("_beam_pipeline_args",
                                                                    "_make_beam_pipeline"),
}
_REBINDERS = ("setattr", "delattr", "swapped")
roots: list[str] = []  # where module_source looks instead of sys.path, when set
_BY_STRING = ("getattr", "hasattr", "setattr", "delattr")


@dataclasses.dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str
    name: str  # the private name, or the rebound one

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def private(segment: str) -> bool:
    return segment.startswith("_") and not (segment.startswith("__") and segment.endswith("__"))


def theirs(path: str | None) -> bool:
    return bool(path) and path.split(".")[0] in PACKAGES


def internal(path: str) -> bool:
    """A dotted path into TensorFlow's or tf-keras' internals, or with a private segment."""
    parts = path.split(".")
    return any(map(private, parts)) or (
        len(parts) > 1 and parts[1] in INTERNAL.get(parts[0], ()))


@functools.cache
def module_source(module: str) -> tuple[ast.Module, bool] | None:
    """(the module's syntax tree, whether it is a package), found on sys.path (or `roots`, where
    tools/upgrade_check.py puts other versions), not imported."""
    for root in roots or [str(REPO), *sys.path]:
        base = Path(root or ".", *module.split("."))
        for path, package in ((base / "__init__.py", True), (base.with_suffix(".py"), False)):
            if path.is_file():
                return ast.parse(path.read_text(errors="replace")), package
    return None


def imports(tree: ast.AST, module: str = "", package: bool = False) -> dict[str, str]:
    """{name bound by an import anywhere in the tree: the dotted path it names}."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            parts = module.split(".") if package else module.split(".")[:-1]
            parts = parts[:len(parts) - node.level + 1] if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            bound.update({alias.asname or alias.name: f"{base}.{alias.name}"
                          for alias in node.names if alias.name != "*"})
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
              and ast.unparse(node.value.func) == "importlib.import_module" and node.value.args
              and isinstance(node.value.args[0], ast.Constant)):
            bound[node.targets[0].id] = str(node.value.args[0].value)
    return bound


def dotted(node: ast.AST, bound: dict[str, str]) -> str | None:
    """The dotted path an expression names, where it starts at an imported name."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, bound)
        return f"{base}.{node.attr}" if base else None
    return None


@functools.cache
def class_names(path: str) -> dict[str, str]:
    """{name: the class of theirs that defines or sets it} over the class at `path` and its
    bases (theirs, and lockstep's walked through)."""
    module, _, name = path.rpartition(".")
    found = module_source(module) if module else None
    if found is None:
        return {}
    tree, package = found
    bound = imports(tree, module, package)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:  # re-exported from another module
        target = bound.get(name)
        return class_names(target) if target and target != path else {}
    names: dict[str, str] = {}
    for base in cls.bases:
        base_path = dotted(base, bound) or (
            f"{module}.{base.id}" if isinstance(base, ast.Name) else None)
        if _followed(base_path):
            names.update(class_names(base_path))
    if theirs(path):
        names.update({n: path for n in _defined(cls)})
    return names


def _followed(path: str | None) -> bool:
    """Whether a base class is walked: theirs, or lockstep's (which may derive from theirs)."""
    return bool(path) and (theirs(path) or (REPO / path.split(".")[0]).is_dir())


def _defined(cls: ast.ClassDef) -> set[str]:
    """The names a class defines in its body or sets on self in its methods."""
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.ClassDef))}
    names |= {t.id for n in cls.body if isinstance(n, (ast.Assign, ast.AnnAssign))
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
              if isinstance(t, ast.Name)}
    names |= {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute)
              and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
              and n.value.id == "self"}
    return names


def _relative(path: str) -> Path:
    """A file's path in the repository (as given where it is outside it)."""
    full = (REPO / path).resolve()
    return full.relative_to(REPO) if full.is_relative_to(REPO) else Path(path)


def _module_name(path: str) -> str:
    return ".".join(_relative(path).with_suffix("").parts)


def _scan_names(tree: ast.AST, bound: dict[str, str], say) -> None:
    """Private imports, private attributes of theirs, and rebinds."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if theirs(alias.name) and internal(alias.name):
                    say(node, f"imports {alias.name}", alias.name)
        elif isinstance(node, ast.ImportFrom) and theirs(node.module):
            for alias in node.names:
                if internal(node.module) or private(alias.name):
                    say(node, f"imports {node.module}.{alias.name}", alias.name)
        elif isinstance(node, ast.Attribute):
            path = dotted(node, bound)
            if theirs(path) and private(node.attr):
                say(node, f"{ast.unparse(node)}: private to {path.rsplit('.', 1)[0]}", node.attr)
            elif theirs(path) and internal(path) and not internal(path.rsplit(".", 1)[0]):
                say(node, f"{ast.unparse(node)}: internal to {path.split('.')[0]}", node.attr)
            if theirs(dotted(node.value, bound)) and not isinstance(node.ctx, ast.Load):
                say(node, f"rebinds {path}", node.attr)
        elif isinstance(node, ast.Call):
            _scan_call(node, bound, say)
        elif isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) >= 3:
            first, second = node.elts[:2]
            if (theirs(dotted(first, bound)) and isinstance(second, ast.Constant)
                    and isinstance(second.value, str)):
                say(node, f"({dotted(first, bound)}, {second.value!r}, ...): a name of theirs "
                          "and a value to rebind it to", second.value)
        elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            key = node.slice
            if (ast.unparse(node.value) == "sys.modules" and isinstance(key, ast.Constant)
                    and theirs(str(key.value)) and str(key.value).split(".")[0] not in TENSORFLOW):
                say(node, f"replaces the module {key.value}", str(key.value))


def _scan_call(node: ast.Call, bound: dict[str, str], say) -> None:
    func = node.func.id if isinstance(node.func, ast.Name) else (
        node.func.attr if isinstance(node.func, ast.Attribute) else "")
    if not node.args or func not in _REBINDERS + _BY_STRING:
        return
    target = dotted(node.args[0], bound)
    name = node.args[1] if len(node.args) > 1 else None
    name = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
    first = node.args[0]
    if func in _REBINDERS and (theirs(target) or (
            isinstance(first, ast.Constant) and theirs(str(first.value)))):
        say(node, f"rebinds {target or first.value}{'.' + name if name else ''}", name or "")
    elif func in _BY_STRING and theirs(target) and name and private(name):
        say(node, f"{func}({target}, {name!r}): private to {target}", name)


def _scan_subclasses(tree: ast.AST, bound: dict[str, str], module: str, say) -> None:
    """Private names of theirs overridden or reached through self, cls or super()."""
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names: dict[str, str] = {}
        for base in cls.bases:
            base_path = dotted(base, bound) or (
                f"{module}.{base.id}" if isinstance(base, ast.Name) else None)
            names.update(class_names(base_path) if _followed(base_path) else {})
        names = {n: owner for n, owner in names.items()
                 if private(n) and n not in EXECUTOR_CONTRACT.get(owner, ())}
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                say(node, f"{cls.name} overrides {names[node.name]}.{node.name}", node.name)
        for node in ast.walk(cls):
            if (isinstance(node, ast.Attribute) and node.attr in names
                    and ast.unparse(node.value) in ("self", "cls", "super()")):
                say(node, f"{ast.unparse(node)}: private to {names[node.attr]}", node.attr)


def _candidates(tree: ast.AST, bound: dict[str, str]) -> list[ast.Attribute]:
    """Private attributes on objects of unknown type (super() included: a mixin's base is not
    known from source): not on self or cls, and not reached from an imported name (those are the
    other rules', or not theirs)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and private(node.attr)):
            continue
        if ast.unparse(node.value) in ("self", "cls"):
            continue
        root = node.value
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if not (isinstance(root, ast.Name) and root.id in bound):
            found.append(node)
    return found


def set_by_theirs(names: set[str]) -> dict[str, str]:
    """{name: the first file of theirs (tests aside) where a class sets or defines it}."""
    if not names:
        return {}
    pattern = _setting(names)
    found: dict[str, str] = {}
    ours = None
    for package in PACKAGES:
        root = next((Path(p, package) for p in sys.path if Path(p, package).is_dir()), None)
        if package in TENSORFLOW:  # TensorFlow's own names, but for those lockstep's set too
            ours = ours if ours is not None else _set_by_ours(names)
        for path in sorted(root.rglob("*.py")) if root else ():
            if path.name.endswith("_test.py"):
                continue
            for name in pattern.findall(path.read_text(errors="replace")):
                if package not in TENSORFLOW or name not in ours:
                    found.setdefault(name, str(path.relative_to(root.parent)))
    return found


def _setting(names: set[str]) -> re.Pattern:
    return re.compile(r"(?:self\.|def |class )(" + "|".join(map(re.escape, sorted(names)))
                      + r")\b")


def _set_by_ours(names: set[str]) -> set[str]:
    """The names among `names` that a class of lockstep's sets or defines."""
    pattern = _setting(names)
    return {name for path in tracked() for name in pattern.findall((REPO / path).read_text())}


def findings(paths: list[str]) -> list[Finding]:
    """Every private use or rebinding of theirs in the files (the wall's own included)."""
    results: list[Finding] = []
    unknown: list[tuple[str, ast.Attribute]] = []
    for path in paths:
        tree = ast.parse((REPO / path).read_text(), filename=path)
        bound = imports(tree)

        def say(node, what, name, path=path):
            results.append(Finding(path, node.lineno, what, name))

        _scan_names(tree, bound, say)
        _scan_subclasses(tree, bound, _module_name(path), say)
        unknown += [(path, node) for node in _candidates(tree, bound)]
    where = set_by_theirs({node.attr for _, node in unknown})
    seen = {(f.path, f.line, f.name) for f in results}
    results += [Finding(path, node.lineno, f"{ast.unparse(node)}: a class of theirs sets or "
                        f"defines {node.attr} ({where[node.attr]})", node.attr)
                for path, node in unknown
                if node.attr in where and (path, node.lineno, node.attr) not in seen]
    return sorted(set(results), key=lambda f: (f.path, f.line, f.what))


def outside_wall(paths: list[str]) -> list[str]:
    return [p for p in paths if not _relative(p).as_posix().startswith(WALLS)]


def tracked() -> list[str]:
    """Every .py file git tracks (or has been told to add), relative to the repository."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    return [line for line in listed.stdout.splitlines() if (REPO / line).is_file()]


def main(argv: list[str]) -> int:
    found = findings(outside_wall(argv or tracked()))
    for finding in found:
        print(finding)
    if found:
        print(f"private_names: {len(found)} private names or rebinds of {', '.join(PACKAGES)} "
              f"outside {' and '.join(WALLS)}: name them through the wall", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
