"""Each of the project's errors declares its exit status (runtime/exit_status.py);
pipeline/errors.py maps an error to it without importing the modules that define them."""

import ast
import importlib

import pytest

from conftest import REPO
from runtime import exit_status

# Every error class a user can meet, and the status the README's table gives it.
DECLARED = {
    "pipeline.config.ConfigError": 2, "components.csv_format.CsvError": 2,
    "pipeline.preflight.DriftError": 2, "pipeline.split_check.SkewError": 2,
    "components.spans.SpanError": 2, "pipeline.storage.StorageError": 2,
    "trainer_module.settings.TrainerConfigError": 2, "trainer_module.scaling.ScalingError": 2,
    "trainer_module.slices.SliceError": 2, "pipeline.local.schedule.ScheduleError": 2,
    "pipeline.local.run_lock.Locked": 3, "runtime.termination.Preempted": 5,
    "runtime.termination.Stopped": 5, "pipeline.errors.PipelineFailed": 1,
    "pipeline.kubeflow.client.KfpError": 1, "pipeline.local.kfp_local.KfpLocalError": 1,
    "components.example_validator.AnomaliesFound": 1,
}


@pytest.mark.parametrize("dotted", sorted(DECLARED))
def test_each_error_and_its_subclasses_declare_their_status(dotted):
    from pipeline import errors

    module, name = dotted.rsplit(".", 1)
    kind = getattr(importlib.import_module(module), name)
    sub = type("Sub" + name, (kind,), {})  # a subclass means what its base means
    err = sub.__new__(sub)
    assert errors.status_of(err) == exit_status.of(err) == DECLARED[dotted]


def test_an_error_of_no_project_class_is_a_bug_with_no_status():
    from pipeline import errors

    assert errors.status_of(ValueError("x")) is None and errors.status_of(KeyError()) is None


def test_errors_py_imports_nothing_of_the_project_but_the_statuses():
    tree = ast.parse((REPO / "pipeline" / "errors.py").read_text())
    imported = {node.module if isinstance(node, ast.ImportFrom) else alias.name
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert imported - {"__future__"} == {"runtime"}
