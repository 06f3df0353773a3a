"""components/compat/deferred.py: a package's `__init__` deferred until the package is asked for a
name, its modules importable meanwhile (what it does to tfx.components; tests/test_compat.py checks
that nothing lockstep imports asks the catalogue)."""

import importlib
import sys
import threading

import pytest

from components.compat.deferred import defer_package_init, package_init_ran

INIT = """
import sys
sys.modules[__name__].runs = getattr(sys.modules[__name__], "runs", 0) + 1
from {name}.tool import Tool
{extra}
"""


@pytest.fixture
def package(tmp_path, monkeypatch, request):
    """A fresh package `NAME` (its __init__ imports `Tool` from its module `tool`, and counts its
    runs; its module `other` it leaves alone), on sys.path; its modules out of sys.modules
    afterwards."""
    name = f"deferred_{request.node.name.split('[')[0][5:25]}_{id(tmp_path) % 10_000}"

    def make(extra: str = "") -> str:
        root = tmp_path / name
        root.mkdir()
        (root / "__init__.py").write_text(INIT.format(name=name, extra=extra))
        (root / "tool.py").write_text("class Tool:\n    pass\n")
        (root / "other.py").write_text("VALUE = 1\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        return name

    yield make
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_its_modules_import_without_its_init_which_runs_once_at_the_first_name_asked(package):
    name = package()
    defer_package_init(name)
    tool = importlib.import_module(f"{name}.tool")
    assert not package_init_ran(name)
    assert "runs" not in sys.modules[name].__dict__
    from_package = importlib.import_module(name).Tool  # `from NAME import Tool`
    assert from_package is tool.Tool and package_init_ran(name)
    assert sys.modules[name].runs == 1
    assert sys.modules[name].tool is tool  # the module imported before is the package's
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        sys.modules[name].missing  # noqa: B018  the lookup is what is tested
    assert sys.modules[name].runs == 1


def test_a_submodule_or_a_probe_runs_nothing_and_a_star_import_runs_it(package):
    name = package()
    defer_package_init(name)
    module = sys.modules[name]
    other = module.other  # `from NAME import other`: that module only
    assert other.VALUE == 1 and not package_init_ran(name)
    for probe in ("__wrapped__", "__signature__", "__deepcopy__"):  # inspect's, copy's
        assert not hasattr(module, probe)
    assert not package_init_ran(name)
    namespace = {}
    exec(f"from {name} import *", namespace)  # asks for __all__ first: runs the __init__
    assert namespace["Tool"] is module.tool.Tool and module.runs == 1


def test_threads_asking_at_once_see_one_run(package):
    name = package(extra="import time\ntime.sleep(0.2)")  # a slow __init__: the others must wait
    defer_package_init(name)
    module, seen = sys.modules[name], []
    threads = [threading.Thread(target=lambda: seen.append(module.Tool)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4 and len(set(seen)) == 1 and module.runs == 1


def test_a_failing_init_raises_as_its_import_would_and_leaves_no_package(package):
    name = package(extra="raise ImportError('a dependency is missing')")
    defer_package_init(name)
    with pytest.raises(ImportError, match="a dependency is missing"):
        sys.modules[name].Tool  # noqa: B018  the lookup is what is tested
    assert name not in sys.modules


def test_a_module_getattr_the_init_defines_is_kept(package):
    name = package(extra="def __getattr__(attribute):\n    return 'theirs: ' + attribute")
    defer_package_init(name)
    module = sys.modules[name]
    assert module.Tool is module.tool.Tool and package_init_ran(name)
    assert module.anything == "theirs: anything"


def test_an_imported_package_or_a_plain_module_is_left_alone(package):
    name = package()
    importlib.import_module(name)
    defer_package_init(name)
    assert package_init_ran(name) and sys.modules[name].runs == 1
    defer_package_init("json.decoder")  # a module, not a package
    assert "__getattr__" not in vars(importlib.import_module("json.decoder"))
