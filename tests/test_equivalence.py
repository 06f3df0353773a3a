"""The equivalence check (`lockstep verify`), on the penguins run's own data: N replicas make one
device's update with the built-in
model, and the user hooks that break it (tests/user_hooks.py) are caught, by orders of magnitude.

In process here: the test process already has 8 logical CPU devices (conftest.py)."""

import os

import numpy as np
import pytest

from conftest import REPO, penguins_job
from trainer_module import equivalence, target_statistics, verify_process, weight_average
from trainer_module.settings import TrainerConfig

pytestmark = pytest.mark.slow


def _job(penguins_run, **trainer):
    return penguins_job(penguins_run, penguins_run.root / "verify", **trainer)


def _verify(penguins_run, replicas=2, **trainer) -> equivalence.Verification:
    result = equivalence.check(_job(penguins_run, **trainer), replicas)
    print("\n".join(result.lines()))  # the figures, with -s
    return result


@pytest.mark.parametrize("replicas", [2, 4])
def test_builtin_model_makes_one_devices_update(penguins_run, replicas):
    result = _verify(penguins_run, replicas)
    # The default batch on penguins' 272 training rows is the smallest, 32 (scaling.py); the rate
    # is base_learning_rate x sqrt(global batch / base_batch).
    defaults = TrainerConfig()
    learning_rate = defaults.base_learning_rate * (32 * replicas / defaults.base_batch) ** 0.5
    assert (result.replicas, result.steps, result.per_replica_batch, result.global_batch) == (
        replicas, 3, 32, 32 * replicas)
    assert result.learning_rate == pytest.approx(learning_rate)
    assert result.passed and result.moved > 0
    # Float32 sums in another order: a float32 step or so of a weight apart (2 replicas: 7.5e-9
    # and, in one fresh-clone CI, 1.5e-8 of a movement of 2.7e-4: the rate for an ensemble, 0.002
    # here, moves the weights little, so one float32 step is 2.8e-5 to 5.5e-5 of the movement).
    # The rounding allowed (4 float32 steps of the weights) covers it, and the guard holds: the
    # weights moved over 50 allowances.
    assert result.max_difference <= result.rounding < 1e-6 < result.moved / 50
    rounded = (f" with float32 rounding ({result.rounding:.1e}, 4 float32 steps of its weights)"
               if result.relative > result.tolerance else "")
    assert result.lines() == [
        f"verify: {replicas} replicas x batch 32 = global batch {32 * replicas}, 3 SGD steps at "
        f"learning rate {learning_rate:g}",
        f"verify: largest weight difference {result.max_difference:.1e} ({result.variable}), "
        f"weights moved {result.moved:.1e}: {result.relative:.1e} of the movement, within "
        f"1e-04{rounded}: {replicas} replicas make the update one device makes on the global "
        "batch"]


@pytest.mark.parametrize("settings", [{"embedding_min_rows": 100.0}, {},
                                      {"shard_embeddings_over": 0}])
def test_the_target_statistics_are_counted_as_the_run_counts_them(penguins_run, monkeypatch,
                                                                  settings):
    """The built-in model's target statistics (trainer_module/target_statistics.py: penguins'
    island, sex, year and two integer columns' codes) are counted from the fit rows before both
    sides train, and the check holds with them: a row's fold, and so its feature in training, is
    the same on any replica. A table whose values average fewer than trainer.embedding_min_rows
    fit rows is its statistics alone: at 100, every table of penguins' 251 fit rows (three
    values: about 84 rows each); at 20 (penguins_job's, conftest.PENGUIN_TABLES_TRAINED),
    the codes' (a few rows a value), while island's, sex's and year's embeddings train, on both
    sides, stacked or split over the replicas."""
    counted, count = [], target_statistics.fill

    def fill(model, dataset, task):
        [layer] = target_statistics.layers(model)
        counted.append((layer, count(model, dataset, task)))
        return counted[-1][1]

    monkeypatch.setattr(target_statistics, "fill", fill)
    result = _verify(penguins_run, 4, **settings)
    assert result.passed and result.max_difference < 1e-5, result.lines()
    assert counted and 200 < counted[0][1] <= 285  # the fit rows of the train split
    kept = dict(zip([f for f, _ in counted[0][0].tables], counted[0][0].kept.numpy().tolist()))
    trained = set() if settings.get("embedding_min_rows") == 100 else {
        "island_xf", "sex_xf", "year_code"}
    assert {f for f, k in kept.items() if k} == trained, kept
    assert {"body_mass_g_code", "flipper_length_mm_code"} <= set(kept) - trained


def test_the_weights_averages_are_held_against_keras_averages(penguins_run, monkeypatch):
    """trainer.weight_average (on by default): the averaged model is compared too, weight for
    weight, with the same average taken over Keras' steps on one device; an average that moves
    otherwise on the replicas fails, in a variable named as an average."""
    right = _verify(penguins_run, 2)
    assert right.passed
    moved_twice = weight_average.WeightAverage.update

    def update(self, strategy, step):  # the average moved twice a step on the replicas
        moved_twice(self, strategy, step)
        moved_twice(self, strategy, step)

    monkeypatch.setattr(weight_average.WeightAverage, "update", update)
    wrong = _verify(penguins_run, 2)
    assert not wrong.passed and wrong.variable.startswith("average of "), wrong.lines()
    # The trained weights themselves still agree: only the averages differ.
    assert wrong.max_difference > 100 * right.max_difference


def test_float32_rounding_is_allowed_only_where_it_cannot_hide_a_wrong_model():
    """equivalence.rounding_allowance, on the figures of the built-in model (weights about 0.2,
    moved 2.7e-4 in 3 steps): one float32 step of a weight is over half the tolerance of the
    movement, and two pass only with the allowance; the mildest wrong figure measured (0.04 of
    the movement) fails, there and at the guard's edge; where the weights barely move there is
    no allowance."""
    step = float(np.spacing(np.float32(0.2)))  # 1.5e-8
    rounding = equivalence.rounding_allowance(0.2, 3, 2.7e-4)
    assert rounding == 4 * step

    def passes(difference, moved, allowance):  # check's verdict, at the default tolerance
        return equivalence.within_tolerance(difference, moved, 1e-4, allowance)

    assert step / 2.7e-4 > 1e-4 / 2 and passes(step, 2.7e-4, rounding)
    assert passes(2 * step, 2.7e-4, rounding) and not passes(2 * step, 2.7e-4, 0.0)
    assert not passes(0.04 * 2.7e-4, 2.7e-4, rounding)
    edge = equivalence.ROUNDING_GUARD * rounding
    assert equivalence.rounding_allowance(0.2, 3, edge) == rounding
    assert not passes(0.04 * edge, edge, rounding)
    assert equivalence.rounding_allowance(0.2, 3, edge * 0.99) == 0.0


def test_a_loss_averaged_over_the_replica_batch_fails(penguins_run):
    result = _verify(penguins_run, loss="user_hooks:per_replica_mean_loss")
    assert not result.passed
    # Each replica's update is the whole of one device's: 2 replicas move the weights twice as
    # far, so they differ from one device by about one whole movement.
    assert 0.5 < result.relative < 1.5
    assert result.variable.endswith(":0")
    assert (f"beyond 1e-04: the replicas do NOT make one device's update; look at "
            f"{result.variable} (a loss averaged over one replica's batch") in result.lines()[1]


@pytest.mark.parametrize("replicas, settings", [
    (4, {"shard_embeddings_over": 0}), (2, {"accumulation_steps": 2})])
def test_dropout_keyed_on_the_row_makes_one_devices_update(penguins_run, replicas, settings):
    """trainer.dropout and column_dropout draw a row's masks from its inputs and the global step
    (trainer_module/row_dropout.py): the same on 2 and 4 replicas, on tables split over them
    (the ids come beside the rows) and over accumulated micro-batches, as on one device."""
    result = _verify(penguins_run, replicas, dropout=0.3, column_dropout=0.3, **settings)
    assert result.passed and result.updates == 3, result.lines()
    assert result.max_difference < 1e-5


def test_dropout_drawn_on_each_replica_fails(penguins_run, monkeypatch):
    """The control: the same layers drawing each replica's masks from its own generator (as
    Keras' Dropout does) do not make one device's update, and verify says so."""
    import tensorflow as tf

    from trainer_module import row_dropout

    monkeypatch.setattr(row_dropout, "keep_mask", lambda key, step, salt, units, rate: (
        tf.random.uniform([tf.shape(key)[0], units]) >= rate))
    result = _verify(penguins_run, 2, dropout=0.3, column_dropout=0.3)
    assert not result.passed
    assert result.relative > 100 * result.tolerance


def test_per_replica_batch_normalization_fails(penguins_run):
    result = _verify(penguins_run, model="user_hooks:bn_model")
    assert not result.passed
    assert result.relative > 100 * result.tolerance
    assert result.variable in result.lines()[1]


def test_synchronized_batch_normalization_passes(penguins_run):
    result = _verify(penguins_run, model="user_hooks:synchronized_bn_model")
    assert result.passed
    assert result.relative < result.tolerance / 10


@pytest.fixture
def hooks_on_pythonpath(monkeypatch):
    """The subprocess imports user_hooks from tests/ (and lockstep from the repository)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "tests"), str(REPO)]))


def test_command_line_error_is_one_line(penguins_run, hooks_on_pythonpath):
    with pytest.raises(RuntimeError, match=r"exited with status 2: HookError: trainer.model: "
                                           r"module 'user_hooks' .* has no 'missing'") as error:
        verify_process.run_in_subprocess(_job(penguins_run, model="user_hooks:missing"))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("hosts", [2, 4])
def test_host_processes_each_reading_its_share_make_one_devices_update(
        penguins_run, hooks_on_pythonpath, hosts):
    """MultiWorkerMirroredStrategy in 2 and 4 processes on loopback, as the hosts of a slice: each
    process's input pipeline reads only its own share of the records (the run's dataset function
    with its input context), 4 global steps in two host calls, against Keras on one device fed
    the shares together: 1e-5."""
    result = verify_process.run_in_subprocess(_job(penguins_run), steps=4, workers=hosts)
    print("\n".join(result.lines()))
    assert (result.workers, result.replicas, result.updates, result.global_batch) == (
        hosts, hosts, 4, 32 * hosts)
    assert result.passed and result.max_difference < 1e-5, result.lines()
    assert result.lines()[0].startswith(f"verify: {hosts} replicas in {hosts} worker processes "
                                        "x batch 32")


@pytest.mark.parametrize("settings, figure", [
    ({"jit_compile": True}, "XLA"),
    # XLA on CPU aborts the process compiling a 16-bit dot (scaling.UNCOMPILED): not used.
    ({"jit_compile": True, "precision": "mixed_bfloat16"},
     "mixed_bfloat16, no XLA (XLA on CPU cannot compile 16-bit dots)"),
    ({"jit_compile": True, "precision": "mixed_float16"},
     "mixed_float16, no XLA (XLA on CPU cannot compile 16-bit dots)"),
    ({"accumulation_steps": 2}, "x 2 accumulated = global batch 128"),
    ({"precision": "mixed_bfloat16"}, "mixed_bfloat16")])
def test_xla_accumulation_and_bfloat16_make_one_devices_update(penguins_run, settings, figure):
    result = _verify(penguins_run, **settings)
    assert result.passed and result.updates == 3, result.lines()
    assert figure in result.lines()[0]
    if "precision" not in settings:
        assert result.max_difference < 1e-5


def test_verify_checks_at_the_batch_the_plan_gives_the_runs_hardware(penguins_run, monkeypatch):
    """The Trainer passes its replicas' kind (a TPU core's default batch is not a CPU's); verify
    then checks at that batch, on CPU replicas."""
    from trainer_module import scaling

    monkeypatch.setattr(scaling, "MIN_STEPS_PER_EPOCH", 1)  # so penguins' 272 rows keep them
    monkeypatch.setattr(scaling, "HARDWARE_BATCH", {"tpu": 16, "gpu": 64, "cpu": 32})
    job = _job(penguins_run)
    batches = {kind: equivalence.check(job, 2, hardware=kind) for kind in ("tpu", "gpu", "")}
    assert {k: v.per_replica_batch for k, v in batches.items()} == {"tpu": 16, "gpu": 64, "": 32}
    assert all(v.passed for v in batches.values())


@pytest.mark.parametrize("settings", [{}, {"accumulation_steps": 2, "jit_compile": True},
                                      {"precision": "mixed_float16"}])
def test_verify_covers_tables_split_over_the_replicas(penguins_run, settings):
    """trainer.shard_embeddings_over = 0: each of penguins' tables split over the 4 replicas
    (model parallelism, trainer_module/sharded_embedding.py), counted whole against one device
    holding each table whole; the line names them. Under mixed_float16, the rows' update is
    loss-scaled and skipped with the optimizer's."""
    result = _verify(penguins_run, 4, shard_embeddings_over=0, **settings)
    assert result.passed and result.updates == 3, result.lines()
    assert set(result.sharded_tables) >= {"island_xf", "sex_xf"}
    assert "tables split over the replicas: " + ", ".join(result.sharded_tables) in \
        result.lines()[0]
    if "precision" not in settings:
        assert result.max_difference < 1e-5


@pytest.mark.parametrize("hosts", [2, 4])
def test_tables_split_over_worker_processes_make_one_devices_update(
        penguins_run, hooks_on_pythonpath, hosts):
    """MultiWorkerMirroredStrategy in 2 and 4 processes, every table split over them
    (trainer.shard_embeddings_over = 0): each process holds its replicas' blocks only, the rows
    are exchanged between the processes each step, and the tables gathered whole from every
    process are one device's. With the run's own optimizer (`--optimizer run`: AdamW, warmup
    and decay), the tables' rows updated by the process that owns them, 24 steps: within 1e-6
    of Keras on one device holding every table whole.

    Seed 5: AdamW moves a weight by up to its rate however small its gradient, so a float32 sum in
    another order that flips one hidden unit's ReLU on one row shows at the rate's scale. Under
    the default seed (42) the 4 processes' trajectory meets such a unit at 24 steps (8.3e-06;
    with the numeric embedding's clip at 3 it met one at 14 steps instead: 6.2e-04, all of it in
    6 of the last hidden layer's 128 units). Seed 5 meets none in these 24 steps: 1.2e-07."""
    result = verify_process.run_in_subprocess(_job(penguins_run, shard_embeddings_over=0, seed=5),
                                              steps=24, workers=hosts, optimizer="run")
    print("\n".join(result.lines()))
    assert (result.workers, result.replicas, result.updates) == (hosts, hosts, 24)
    assert result.passed and result.max_difference <= 1e-6, result.lines()
    assert result.optimizer == "AdamW" and "24 AdamW steps" in result.lines()[0]
    assert set(result.sharded_tables) >= {"island_xf", "sex_xf"}
    assert f"in {hosts} worker processes" in result.lines()[0]
    assert "tables split over the replicas: " in result.lines()[0]
