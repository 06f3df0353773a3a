"""Each bad input: one line naming the file and column, a non-zero exit, nothing written."""

import pytest

from conftest import PipelineRun, REPO

PENGUINS = (REPO / "data" / "penguins" / "penguins.csv").read_text()


def _run_expecting_error(tmp_path, *args):
    run = PipelineRun(tmp_path)
    result = run.run_here(*args)
    assert result.returncode != 0
    lines = [x for x in result.stderr.strip().splitlines() if x.startswith("lockstep: error:")]
    assert len(lines) == 1, result.stderr
    assert run.pushed_versions() == []
    assert not run.pipeline_root.exists(), "nothing may be written on bad input"
    return lines[0]


def test_missing_data_path(tmp_path):
    line = _run_expecting_error(tmp_path, "--data", tmp_path / "nope.csv")
    assert "nope.csv: no such file or directory" in line


def test_empty_csv(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    line = _run_expecting_error(tmp_path, "--data", tmp_path / "empty.csv")
    assert "empty.csv: the file is empty" in line


def test_header_only_csv(tmp_path):
    (tmp_path / "h.csv").write_text("a,b,species\n")
    line = _run_expecting_error(tmp_path, "--data", tmp_path / "h.csv")
    assert "h.csv: the CSV has a header but no data rows" in line


def test_label_column_that_does_not_exist(tmp_path):
    line = _run_expecting_error(tmp_path, "--label", "genus")
    assert "penguins.csv: label column 'genus' is not in the header" in line


def test_numeric_column_full_of_text(tmp_path):
    lines = PENGUINS.splitlines()
    header = lines[0].split(",")
    col = header.index("body_mass_g")
    bad = [lines[0]]
    for i, line in enumerate(lines[1:]):
        cells = line.split(",")
        if i % 3 == 0:
            cells[col] = "heavy"
        bad.append(",".join(cells))
    (tmp_path / "bad.csv").write_text("\n".join(bad) + "\n")
    line = _run_expecting_error(tmp_path, "--data", tmp_path / "bad.csv")
    assert "bad.csv: column 'body_mass_g' is numeric" in line and "line 2 holds text 'heavy'" in line


def test_directory_with_no_csv(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("hi")
    line = _run_expecting_error(tmp_path, "--data", tmp_path / "data")
    assert "data: the directory has no .csv file" in line


def test_ragged_row(tmp_path):
    (tmp_path / "r.csv").write_text("a,b,species\n1,2,x\n1,x\n")
    line = _run_expecting_error(tmp_path, "--data", tmp_path / "r.csv")
    assert "r.csv: line 3 has 2 cells, the header has 3" in line


def test_bad_config_file(tmp_path):
    (tmp_path / "c.toml").write_text("[trainer]\nbatch = 3\n")
    line = _run_expecting_error(tmp_path, "--config", tmp_path / "c.toml")
    assert "c.toml: unknown config key 'trainer.batch'" in line


def _column_csv(path, header, cells, encoding="utf-8"):
    rows = [header] + [f"{cell},{'ab'[i % 2]},{i}" for i, cell in enumerate(cells)]
    path.write_bytes(("\n".join(rows) + "\n").encode(encoding))


@pytest.mark.parametrize("header, cells, encoding, expected", [
    ("x,y,label", [str(i) for i in range(9)] + ["99999999999999999999"], "utf-8",
     "x.csv: column 'x' line 11 holds 99999999999999999999, an integer beyond the int64 range"),
    ("x,y,label", [str(i) for i in range(9)] + ["1_000"], "utf-8",
     "x.csv: column 'x' is numeric (9 numbers) but line 11 holds text '1_000'"),
    ("x,y,label", [str(i) for i in range(9)] + ["\u0661\u0662"], "utf-8",
     "x.csv: column 'x' is numeric (9 numbers) but line 11 holds text '\u0661\u0662'"),
    ("x,y,label", [str(i) for i in range(9)] + ["caf\u00e9"], "latin-1",
     "x.csv: not UTF-8 text"),
    ("a/b,a_b,label", [str(i) for i in range(10)], "utf-8",
     "x.csv: columns 'a/b' and 'a_b' would share the feature name 'a_b' (letters, digits and _ "
     "only): rename one"),
])
def test_input_that_would_fail_deep_inside_is_one_line_before_any_component(
        tmp_path, header, cells, encoding, expected):
    _column_csv(tmp_path / "x.csv", header, cells, encoding)
    line = _run_expecting_error(tmp_path, "--data", tmp_path / "x.csv", "--label", "label")
    assert expected in line, line


def test_a_serving_dir_that_serves_another_label(tmp_path):
    """The serving dir holds another pipeline's model (label 'origin'): this run's model could not
    be compared with it in the Evaluator, nor replace it for its clients. One line naming the
    dir and the flag, before any component runs; the served version is left as it was."""
    import json

    run = PipelineRun(tmp_path)
    served = run.serving_dir / "1700000000"
    served.mkdir(parents=True)
    record = {"version": 1700000000, "target": {"label": "origin", "task": "classification"}}
    (served / "lockstep-push.json").write_text(json.dumps(record))
    result = run.run_here()
    assert result.returncode == 2
    [line] = [x for x in result.stderr.splitlines() if x.startswith("lockstep: error:")]
    assert (f"serving dir {run.serving_dir} serves version 1700000000, a model of label 'origin' "
            "(classification), and this run's label is 'species' (classification)") in line, line
    assert line.endswith("(--serving-dir, paths.serving_dir)"), line
    assert not run.pipeline_root.exists(), "nothing may be written on bad input"
    assert run.pushed_versions() == [served]
    assert json.loads((served / "lockstep-push.json").read_text()) == record
    # `lockstep verify` pushes nothing: the same serving dir is no reason to refuse it.
    from pipeline import config as config_lib
    from pipeline.config import ConfigError
    from pipeline.use_cases import preparing

    config = config_lib.load(None, {"paths.serving_dir": str(run.serving_dir),
                                    "paths.pipeline_root": str(run.pipeline_root)})
    assert preparing.prepare(config, serving=False).decisions.task == "classification"
    with pytest.raises(ConfigError, match="serves version 1700000000, a model of label 'origin'"):
        preparing.prepare(config)
