"""The same data gives the same model: two runs from scratch of one multi-file CSV, in separate
pipeline roots and from copies of the data in separate places, push models that answer alike
(<= 1e-6) and say the same input fingerprint; a run on 8 emulated replicas (another root, Beam's
portable runner for its ExampleGen, every embedding table split over the replicas:
`portable_run`) pushes one device's model (<= 1e-5) from the same input.

Before, the ExampleGen named its files in the order of random temporary names: the same rows lay
under other names each run, the validation part (carved by a record's file name and place) moved,
and two runs of one CSV pushed models whose probabilities were up to 0.88 apart
(components/csv_example_gen.py, _finalize)."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from conftest import PENGUIN_TABLES_TRAINED, PipelineRun, eval_examples, lockstep, penguin_parts

# One device at the 8-replica run's global batch (8 x 8): the same plan, steps and learning rate,
# and the same tables trained (conftest.PENGUIN_TABLES_TRAINED).
ONE_DEVICE = f"[trainer]\nglobal_batch = 64\nembedding_min_rows = {PENGUIN_TABLES_TRAINED}\n"


@pytest.fixture(scope="module")
def one_device_runs(tmp_path_factory):
    """Two runs on one device, each from scratch in a root of its own, each on its own copy of
    the bundled data as three CSV files."""
    runs = []
    for name in ("first", "second"):
        root = tmp_path_factory.mktemp(f"same-input-{name}")
        (root / "one.toml").write_text(ONE_DEVICE)
        run = PipelineRun(root)
        run.result = run.run("--config", root / "one.toml", "--data", penguin_parts(root / "data"))
        assert run.result.returncode == 0, run.result.stderr[-3000:]
        runs.append(run)
    return runs


def _fingerprint(run) -> str:
    found = re.findall(r"^Input: fingerprint (\S+) \(", run.result.stdout, re.M)
    assert len(found) == 1, run.result.stdout
    return found[0]


def _examples(run) -> list[str]:
    return sorted(str(p) for p in (run.pipeline_root / "CsvExampleGen").glob("*/*/Split-*/*.gz"))


def _answers(run, serialized) -> np.ndarray:
    (version,) = run.pushed_versions()
    model = tf.saved_model.load(str(version))
    return model.signatures["serving_default"](examples=tf.constant(serialized))[
        "probabilities"].numpy()


def _identities(run) -> dict[str, str]:
    return {p.name: p.read_text() for p in (run.pipeline_root / "CsvExampleGen").glob(
        "*/*/Split-*.identities")}


@pytest.mark.slow
def test_two_runs_of_one_multi_file_csv_push_the_same_model(one_device_runs):
    first, second = one_device_runs
    names = [[p.rsplit("/", 2)[-2:] for p in _examples(run)] for run in one_device_runs]
    assert names[0] == names[1] and len(names[0]) == 6  # three files a split, named alike
    assert _identities(first) == _identities(second) and len(_identities(first)) == 2
    assert _fingerprint(first) == _fingerprint(second)
    assert not _fingerprint(first).startswith("~")  # from the rows' identities
    # Every row of the data, the label taken away, as a server gets it.
    serialized, _ = eval_examples(_examples(first), "species")
    assert len(serialized) == 344
    gap = np.abs(_answers(first, serialized) - _answers(second, serialized)).max()
    print(f"two runs from scratch: fingerprint {_fingerprint(first)}, answers {gap:.2g} apart")
    assert gap <= 1e-6, gap
    # The same rows held out for validation: the same count, the same kept loss.
    held = [re.search(r"validation loss (\S+) on (\S+) rows", run.result.stdout).groups()
            for run in one_device_runs]
    assert held[0] == held[1], held


@pytest.mark.slow
def test_runs_json_shows_the_input_fingerprint(one_device_runs):
    first = one_device_runs[0]
    result = lockstep("runs", "--pipeline-root", first.pipeline_root, "--json", cwd=first.root)
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = json.loads(result.stdout)
    assert row["input_fingerprint"] == _fingerprint(first)


@pytest.mark.slow
def test_eight_replicas_from_another_root_push_one_devices_model(one_device_runs, portable_run):
    """8 emulated replicas at per-replica batch 8, each holding 1/8 of every embedding table
    (trainer.shard_embeddings_over = 0: model parallelism, checkpoints, early stopping's best
    weights and the export of whole tables in a real run), with the portable runner's ExampleGen,
    against one device at global batch 64, its tables whole, with the direct runner's: the same
    files, the same fingerprint, the same model."""
    first = one_device_runs[0]
    assert "global batch          64  (= 8 x 8)" in portable_run.result.stdout + \
        portable_run.result.stderr
    [sharded] = re.findall(r"^Sharded tables: (.*)$", portable_run.result.stdout, re.M)
    for feature in ("island_xf", "sex_xf", "year_code"):
        # Each a row or more a block: a table of 4 rows on 4 of the 8 replicas.
        assert re.search(feature + r": ([0-9]+) rows x 8, .* split over \1 replicas", sharded), \
            sharded
    assert "Sharded tables" not in first.result.stdout
    assert _identities(portable_run) == _identities(first)
    assert _fingerprint(portable_run) == _fingerprint(first)
    serialized, _ = eval_examples(_examples(first), "species")
    gap = np.abs(_answers(first, serialized) - _answers(portable_run, serialized)).max()
    print(f"8 replicas against one device: answers {gap:.2g} apart")
    assert gap <= 1e-5, gap
