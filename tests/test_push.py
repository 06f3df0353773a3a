"""The push (components/serving_versions.py, components/pusher.py): atomic, checked, once per model.

Real SavedModels with a `serving_default` over serialized tf.Examples, real subprocess serving
checks, real kills."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from components import serving_check, serving_versions
from conftest import REPO


def _model(path, scale: float, padding_floats: int = 0):
    """A SavedModel whose serving_default gives scale * x for tf.Examples with a float x."""

    class Model(tf.Module):
        def __init__(self):
            self.scale = tf.Variable(scale)
            self.padding = tf.Variable(tf.random.uniform([padding_floats])) if padding_floats else None

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            x = tf.io.parse_example(examples, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]
            return {"predictions": x * self.scale}

    model = Model()
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve})
    return str(path)


def _examples(path, n=5):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for i in range(n):
            example = tf.train.Example()
            example.features.feature["x"].float_list.value.append(float(i))
            writer.write(example.SerializeToString())
    return [str(path)]


def _check(files):
    return lambda path: serving_check.run(path, files)


def _numbered(serving):
    return sorted(int(n) for n in os.listdir(serving) if n.isdigit())


@pytest.mark.slow
def test_a_poller_never_sees_a_partial_version_and_each_loads(tmp_path):
    files = _examples(tmp_path / "eval.gz")
    models = [_model(tmp_path / f"m{i}", 1.0 + i, padding_floats=2_000_000) for i in range(3)]
    serving = tmp_path / "serving"
    serving.mkdir()
    seen, stop = {}, threading.Event()

    def poll():
        while True:
            done = stop.is_set()  # one last look after the last push returned
            for name in os.listdir(serving):
                if name.isdigit():
                    try:
                        contents = set(os.listdir(serving / name))
                    except FileNotFoundError:
                        continue
                    seen.setdefault(name, []).append(contents)
            if done:
                return
            # A look a millisecond: a version copied in place (8 MB, fsynced) would be seen
            # partial many times over; without a pause the loop held the GIL and a core from the
            # pushes it watches.
            time.sleep(0.001)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        results = [serving_versions.push(m, str(serving), check=_check(files)) for m in models]
    finally:
        stop.set()
        poller.join()
    assert all(r.pushed for r in results), results
    numbers = [int(os.path.basename(r.destination)) for r in results]
    assert numbers == sorted(numbers) and len(set(numbers)) == 3  # strictly increasing
    assert sorted(seen) == sorted(map(str, numbers))
    for name, snapshots in seen.items():
        for contents in snapshots:  # every look at a numbered dir saw a whole model
            assert {"saved_model.pb", "variables", serving_versions.PUSH_RECORD} <= contents, contents
        model = tf.saved_model.load(str(serving / name))
        assert model.signatures["serving_default"]
    assert not [n for n in os.listdir(serving) if n.startswith(serving_versions.TEMP_PREFIX)]


KILLED_PUSH = """
import sys
sys.path.insert(0, {repo!r})
from components import serving_check, serving_versions
files = {files!r}
serving_versions.push({model!r}, {serving!r}, check=(lambda p: serving_check.run(p, files)) if files else None)
"""


@pytest.mark.slow
def test_a_push_killed_at_random_points_never_leaves_a_partial_version(tmp_path):
    files = _examples(tmp_path / "eval.gz")
    serving = tmp_path / "serving"
    serving.mkdir()
    first = _model(tmp_path / "first", 1.0)
    assert serving_versions.push(first, str(serving), check=_check(files)).pushed
    rng = random.Random(0)
    for attempt in range(6):
        model = _model(tmp_path / f"m{attempt}", 10.0 + attempt, padding_floats=4_000_000)
        script = KILLED_PUSH.format(repo=str(REPO), model=model, serving=str(serving), files=files)
        process = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 4.0))  # the copy, the fsync, the check subprocess, the rename
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        for number in _numbered(serving):  # whatever is numbered is whole and loads
            version = str(serving / str(number))
            assert serving_versions.is_complete(version), os.listdir(version)
            tf.saved_model.load(version)
        assert serving_versions.serving_version(str(serving)) is not None
    # A later push sweeps what the killed ones left and publishes.
    last = serving_versions.push(_model(tmp_path / "last", 99.0), str(serving), check=_check(files))
    assert last.pushed
    assert not [n for n in os.listdir(serving) if n.startswith(serving_versions.TEMP_PREFIX)]


@pytest.mark.slow
def test_a_model_that_does_not_serve_is_not_published(tmp_path):
    files = _examples(tmp_path / "eval.gz")
    serving = tmp_path / "serving"
    broken = tmp_path / "broken"
    module = tf.Module()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, str(broken))  # no serving_default
    with pytest.raises(serving_check.ServingCheckFailed, match="has no serving_default signature"):
        serving_versions.push(str(broken), str(serving), check=_check(files))
    assert _numbered(serving) == []
    assert not [n for n in os.listdir(serving) if n.startswith(serving_versions.TEMP_PREFIX)]
    assert not os.listdir(serving / serving_versions.LEDGER / "pushed")  # so a fixed run may push



def _blessing(verdict: str, sha: str):
    from tfx.types import standard_artifacts

    blessing = standard_artifacts.ModelBlessing()
    blessing.set_string_custom_property(serving_check.VERDICT_KEY, verdict)
    blessing.set_string_custom_property(serving_check.CHECKED_SHA_KEY, sha)
    return blessing


@pytest.mark.slow
def test_the_pusher_relies_on_the_evaluators_check_of_the_same_content_only(tmp_path):
    from components import pusher

    files = _examples(tmp_path / "eval.gz")
    model = _model(tmp_path / "m", 2.0)
    sha = serving_versions.content_hash(model)
    serving = tmp_path / "serving"
    # Started, it runs in its own process and returns at once; it passes on this model.
    tic = time.perf_counter()
    pending = serving_check.start(model, files)
    assert time.perf_counter() - tic < 1.0
    assert pending.verdict() == serving_check.PASSED
    # Checked and passed: the push needs no subprocess (a missing example file would fail one).
    relied = pusher.serving_test(_blessing("passed", sha), model, sha, [])
    assert serving_versions.push(model, str(serving), check=relied).pushed
    # Checked and failed: nothing is published, and the error is the Evaluator's.
    other = _model(tmp_path / "other", 3.0)
    other_sha = serving_versions.content_hash(other)
    failed = _blessing("serving check of X failed (exit 1): boom", other_sha)
    with pytest.raises(serving_check.ServingCheckFailed, match="boom"):
        serving_versions.push(other, str(serving),
                         check=pusher.serving_test(failed, other, other_sha, files))
    assert len(_numbered(serving)) == 1
    # A verdict on other content (or none) is not relied on: the copy is checked itself.
    broken = tmp_path / "broken"
    module = tf.Module()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, str(broken))  # no serving_default
    stale = pusher.serving_test(_blessing("passed", sha), str(broken),
                                serving_versions.content_hash(str(broken)), files)
    with pytest.raises(serving_check.ServingCheckFailed, match="has no serving_default signature"):
        serving_versions.push(str(broken), str(serving), check=stale)
    assert len(_numbered(serving)) == 1


# Below, the bookkeeping of versions and records; the serving check (a subprocess) is above.

def test_the_same_model_is_pushed_once_even_after_its_version_was_removed(tmp_path):
    serving = tmp_path / "serving"
    model = _model(tmp_path / "m", 2.0)
    first = serving_versions.push(model, str(serving), model_uri="artifact/7")
    assert first.pushed and first.note.startswith("pushed as version ")
    again = serving_versions.push(model, str(serving), model_uri="artifact/7")
    assert not again.pushed and again.destination == first.destination
    assert "already pushed as version" in again.note and "removed" not in again.note
    import shutil

    shutil.rmtree(first.destination)  # an operator rolls back
    rolled_back = serving_versions.push(model, str(serving))
    assert not rolled_back.pushed and "since removed" in rolled_back.note
    assert _numbered(serving) == []
    # A new model gets a number above the removed one: numbers never go back.
    new = serving_versions.push(_model(tmp_path / "n", 3.0), str(serving))
    assert int(os.path.basename(new.destination)) > int(os.path.basename(first.destination))


def _damage(version_dir) -> None:
    [data] = [p for p in (version_dir / "variables").iterdir() if ".data-" in p.name]
    content = bytearray(data.read_bytes())
    content[:8] = bytes(8) if content[:8] != bytes(8) else b"\xff" * 8
    data.write_bytes(bytes(content))


def _baseline(serving) -> tuple[str, str]:
    from components import latest_model

    version, passed_over = latest_model.baseline_version(str(serving))
    return version.path, passed_over


def test_a_damaged_version_is_never_the_baseline_and_its_model_is_pushed_again(tmp_path):
    """The newest version's variables are overwritten after its push (a disk fault): it parses,
    but its files are not what was pushed. The baseline is the version before it, with a line
    naming the one passed over; pushing the same model again makes a new version, saying why."""
    from components import latest_model

    serving = tmp_path / "serving"
    older = serving_versions.push(_model(tmp_path / "m0", 1.0), str(serving))
    model = _model(tmp_path / "m1", 2.0)
    assert latest_model.baseline_version(str(tmp_path / "none")) == (None, "")
    newer = serving_versions.push(model, str(serving))
    assert _baseline(serving) == (newer.destination, "")
    _damage(tmp_path / "serving" / os.path.basename(newer.destination))
    number = os.path.basename(newer.destination)
    assert _baseline(serving) == (
        older.destination, f"version {number} passed over: its files are not what was pushed "
        "(sha256 against its push record); a model server would serve it: remove it")
    again = serving_versions.push(model, str(serving))
    assert again.pushed and again.note.endswith(
        f"; version {number} no longer held what was pushed (sha256), so this model was pushed "
        "again"), again.note
    assert _baseline(serving) == (again.destination, "")
    assert float(tf.saved_model.load(again.destination).scale.numpy()) == 2.0


def test_the_baseline_of_another_label_or_task_fails_the_run_in_one_line(tmp_path):
    """LatestPushedModel, the check that holds where no preflight ran (Kubeflow): the serving
    version's push record names what it answers; a run of another label or task fails, naming
    the dir and the flag. The same target, and a record from before targets were recorded, pass."""
    from tfx.types import standard_artifacts

    from components import latest_model

    serving = tmp_path / "serving"
    species = serving_versions.target("species", "classification")
    pushed = serving_versions.push(_model(tmp_path / "m", 2.0), str(serving), answers=species)
    record = json.loads(open(os.path.join(pushed.destination, serving_versions.PUSH_RECORD)).read())
    assert record["target"] == {"label": "species", "task": "classification"}

    def baseline(run_target):
        model = standard_artifacts.Model()
        model.uri = str(tmp_path / f"out-{len(os.listdir(tmp_path))}")
        latest_model.Executor().Do({}, {"model": [model]}, {
            "serving_dir": str(serving), "target": json.dumps(run_target)})
        return latest_model.is_found(model)

    assert baseline(species) and baseline({})
    number = os.path.basename(pushed.destination)
    for label, task in (("body_mass_g", "regression"), ("species", "regression")):
        with pytest.raises(serving_versions.OtherTarget) as err:
            baseline(serving_versions.target(label, task))
        assert str(err.value) == (
            f"serving dir {serving} serves version {number}, a model of label 'species' "
            f"(classification), and this run's label is '{label}' ({task}): its model could "
            "neither be compared with that one nor replace it; give this pipeline a serving dir "
            "of its own (--serving-dir, paths.serving_dir)")
    del record["target"]  # pushed before push records named a target
    with open(os.path.join(pushed.destination, serving_versions.PUSH_RECORD), "w") as handle:
        json.dump(record, handle)
    assert baseline(serving_versions.target("body_mass_g", "regression"))


@pytest.mark.slow
def test_concurrent_pushes_never_share_a_version(tmp_path):
    serving = tmp_path / "serving"
    serving.mkdir()
    models = [_model(tmp_path / f"m{i}", 5.0 + i) for i in range(3)]
    processes = [subprocess.Popen(
        [sys.executable, "-c", KILLED_PUSH.format(repo=str(REPO), model=m, serving=str(serving),
                                                  files=[])]) for m in models]
    assert [p.wait() for p in processes] == [0, 0, 0]
    numbers = _numbered(serving)
    assert len(numbers) == 3
    scales = sorted(float(tf.saved_model.load(str(serving / str(n))).scale.numpy())
                    for n in numbers)
    assert scales == [5.0, 6.0, 7.0]


def test_keep_removes_the_oldest_versions(tmp_path):
    serving = tmp_path / "serving"
    pushed = [serving_versions.push(_model(tmp_path / f"m{i}", float(i)), str(serving), keep=2)
              for i in range(4)]
    assert "removed old version(s)" in pushed[-1].note
    assert [str(serving / str(n)) for n in _numbered(serving)] == [p.destination for p in pushed[2:]]


def test_the_baseline_is_the_serving_version_whatever_metrics_were_recorded(tmp_path):
    serving = tmp_path / "serving"
    for i, accuracy in enumerate([0.90, 0.95, 0.93]):
        serving_versions.push(_model(tmp_path / f"m{i}", float(i)), str(serving),
                         metric={"name": "acc", "value": accuracy, "higher_is_better": True})
    numbers = _numbered(serving)
    # Incomplete versions are never a baseline: no push record, or a truncated SavedModel.
    newest = numbers[-1]
    for offset, with_record in ((1, False), (2, True)):
        bad = serving / str(newest + offset)
        os.makedirs(bad)
        pb = open(serving / str(newest) / "saved_model.pb", "rb").read()
        (bad / "saved_model.pb").write_bytes(pb[: len(pb) // 2])
        if with_record:
            (bad / serving_versions.PUSH_RECORD).write_text(json.dumps({"metric": {"value": 1.0}}))
    # The last complete push serves, though an older one recorded a better metric (0.95): each
    # was measured on the eval data of its own run.
    assert serving_versions.serving_version(str(serving)).number == numbers[2]
    assert serving_versions.serving_version(str(tmp_path / "none")) is None


def test_a_push_killed_after_its_rename_is_not_pushed_again(tmp_path):
    """Killed between the rename and the ledger entry: the version's own record still says
    which content it holds."""
    serving = tmp_path / "serving"
    model = _model(tmp_path / "m", 4.0)
    first = serving_versions.push(model, str(serving))
    for entry in (serving / serving_versions.LEDGER / "pushed").iterdir():
        entry.unlink()
    again = serving_versions.push(model, str(serving))
    assert not again.pushed and again.destination == first.destination
    assert len(_numbered(serving)) == 1


@pytest.mark.slow
def test_a_prewarmed_check_process_takes_the_next_check_and_is_ended_when_unused(tmp_path):
    """The local runner prewarms the check as the Trainer starts: the process imports TensorFlow
    and waits; the next start hands it its arguments (the same process answers), a failing
    model fails it the same way, and one that no check used is ended."""
    files = _examples(tmp_path / "eval.gz")
    model = _model(tmp_path / "m", 2.0)
    serving_check.prewarm()
    [(warm, _)] = serving_check._prewarmed
    serving_check.prewarm()  # one at a time: the waiting one is kept
    assert [p for p, _ in serving_check._prewarmed] == [warm]
    pending = serving_check.start(model, files)
    assert pending._process is warm and serving_check._prewarmed == []
    assert pending.verdict() == serving_check.PASSED
    serving_check.prewarm()
    missing = serving_check.start(str(tmp_path / "nowhere"), files)
    assert "failed (exit 1)" in missing.verdict()
    serving_check.prewarm()
    [(unused, _)] = serving_check._prewarmed
    serving_check.discard_prewarmed()
    assert unused.poll() is not None and serving_check._prewarmed == []
    # Asked for as the Trainer is launched, it starts only as training begins (a cached Trainer
    # starts none), and an ask that no training met is forgotten with the run.
    serving_check.prewarm_when_training_begins()
    assert serving_check._prewarmed == []
    serving_check.discard_prewarmed()
    serving_check.training_begins()
    assert serving_check._prewarmed == []
    serving_check.prewarm_when_training_begins()
    serving_check.training_begins()
    [(warm, _)] = serving_check._prewarmed
    serving_check.training_begins()  # once per ask
    assert [p for p, _ in serving_check._prewarmed] == [warm]
    serving_check.discard_prewarmed()
    assert warm.poll() is not None
