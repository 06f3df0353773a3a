"""How long the refit on every train row trains, and when there is none (trainer_module/refit.py):
the kept weights' epochs of the fit rows, in steps of the same global batch over all the rows."""

import dataclasses
import math
import os

from trainer_module import refit
from trainer_module.custom_config import TrainSpec
from trainer_module.job import TrainJob
from trainer_module.scaling import Plan
from trainer_module.settings import TrainerConfig
from trainer_module.summary import Refit, Stopping, TrainingSummary

PLAN = Plan(replicas=2, per_replica_batch=128, global_batch=256, train_steps=5_393,
            examples=1_380_608, learning_rate=0.004, base_learning_rate=0.004, base_batch=256,
            warmup_steps=20, decay_steps=1_079, accumulation_steps=1)
# diamonds' first fit: patience out at 650 after the best at 400, the rate decayed over 100
# steps from there; the kept weights at 700, from the cooldown.
COOLED = Stopping(stopped_at=750, best_step=700, validation_loss=0.0194, validation_rows=3_466,
                  stopped_early=True, cooled_from=650, fit_rows=31_045, global_batch=256,
                  cooled_best=400, cooled_over=100)


def test_a_cooldown_that_improved_is_refit_flat_for_its_start_then_decayed_over_its_length():
    ratio = 34_511 / 31_045
    steps, decay = refit.steps(COOLED, PLAN, 34_511)
    assert decay == 112 == -(-100 * ratio // 1)  # the cooldown's 100 steps, over 11 % more rows
    assert steps == 445 + 112  # the 400 flat steps too
    assert steps * 256 / 34_511 >= (400 + 100) * 256 / 31_045  # at least the first fit's epochs


def test_the_decay_is_the_cooldowns_length_where_a_stops_chunk_ended_past_it():
    # A cooldown of 30 steps from 780, its end at 810, the stop at the chunk's end, 830.
    late = dataclasses.replace(COOLED, cooled_from=780, cooled_over=30, stopped_at=830,
                               best_step=800)
    assert refit.steps(late, PLAN, 34_511)[1] == 34  # 30 x 1.11, not 50 x 1.11


def test_weights_kept_before_the_cooldown_are_refit_flat_for_their_epochs_then_cooled_down():
    """Weights kept at the flat rate (the first fit's cooldown did not beat them on its
    validation rows) are refit for their epochs at the flat rate, then the cooldown from there:
    trainer.decay_share of the run and it (a quarter of the flat steps at 0.2), over the rows'
    ratio; the refit ends decayed. trainer.decay_share = 0 (no decay): flat to the end."""
    plateau = dataclasses.replace(COOLED, best_step=400)  # the cooldown did not beat them
    assert refit.steps(plateau, PLAN, 34_511, 0.2) == (445 + 112, 112)  # 100 cooldown steps
    no_cooldown = dataclasses.replace(COOLED, cooled_from=0, cooled_best=-1, best_step=300)
    assert refit.steps(no_cooldown, PLAN, 34_511, 0.2) == (334 + 84, 84)  # 75 x 1.11
    assert refit.steps(plateau, PLAN, 34_511, 0.0) == (445, 0)
    again = refit.job(_job(decay_share=0.2), PLAN, plateau, 34_511)
    assert (again.trainer.train_steps, round(again.trainer.decay_share * 557)) == (557, 112)


def test_weights_kept_in_the_planned_decay_are_refit_through_the_whole_decay():
    planned = Stopping(stopped_at=5_393, best_step=5_300, validation_loss=0.3,
                       validation_rows=300, fit_rows=2_700, global_batch=256)
    steps, decay = refit.steps(planned, PLAN, 3_000)
    assert decay == -(-1_079 * 3_000 // 2_700)
    assert steps == -(-(5_393 - 1_079) * 3_000 // 2_700) + decay


def test_nothing_to_refit_without_a_kept_step_rows_beyond_the_fit_rows_or_a_recorded_start():
    assert refit.steps(None, PLAN, 34_511) is None
    assert refit.steps(dataclasses.replace(COOLED, best_step=0), PLAN, 34_511) is None
    assert refit.steps(COOLED, PLAN, 31_045) is None
    assert refit.steps(dataclasses.replace(COOLED, fit_rows=0), PLAN, 34_511) is None
    # A cooldown whose start or length is not known: no guess.
    assert refit.steps(dataclasses.replace(COOLED, cooled_best=-1), PLAN, 34_511) is None
    assert refit.steps(dataclasses.replace(COOLED, cooled_over=0), PLAN, 34_511) is None


def test_no_refit_where_no_score_could_beat_the_kept_weights_and_the_summary_says_why():
    """Kept weights whose validation loss is below the least gain that counts (1e-4) leave the
    validation rows nothing to teach (trainer_module/least_gain.py): no refit; the summary's
    Refit line says why. Just above it, the refit is as before."""
    from pipeline.reporting import summary_text

    perfect = dataclasses.replace(COOLED, validation_loss=3.579e-05)  # loans' first fit
    assert perfect.unbeatable() and refit.steps(perfect, PLAN, 34_511) is None
    assert refit.job(_job(), PLAN, perfect, 34_511) is None
    near = dataclasses.replace(COOLED, validation_loss=1.01e-4)  # a gain of 1e-4 still counts
    assert not near.unbeatable() and refit.steps(near, PLAN, 34_511) == (445 + 112, 112)
    assert not dataclasses.replace(COOLED, validation_loss=math.inf).unbeatable()
    assert not dataclasses.replace(COOLED, validation_loss=math.nan).unbeatable()
    lines = summary_text.stopping_lines(
        TrainingSummary(PLAN, {}, {}, "MirroredStrategy", 2, stopping=perfect))
    assert lines[-1] == ("Refit: none: the validation rows are predicted within the least gain "
                         "that counts (loss 3.579e-05, below 0.0001): the first fit's model "
                         "exported")
    assert not any(line.startswith("Refit") for line in summary_text.stopping_lines(
        TrainingSummary(PLAN, {}, {}, "MirroredStrategy", 2, stopping=near)))


def _job(**trainer) -> TrainJob:
    spec = TrainSpec(label="price", task="regression", trainer=TrainerConfig(**trainer))
    return TrainJob(train_files=("train.gz",), eval_files=(), transform_dir="/t",
                    model_run_dir="/runs/8", serving_model_dir="/serving", spec=spec)


def test_the_refit_job_fixes_steps_batch_and_decay_holds_out_nothing_and_writes_apart():
    again = refit.job(_job(), PLAN, COOLED, 34_511)
    cfg = again.trainer
    assert (cfg.train_steps, cfg.validation_share, cfg.refit_rows, cfg.verify) == (557, 0.0, 0, False)
    assert (cfg.global_batch, cfg.per_replica_batch, cfg.accumulation_steps) == (256, 0, 1)
    assert round(cfg.decay_share * cfg.train_steps) == 112
    assert again.model_run_dir == "/runs/8/lockstep_refit" and again.serving_model_dir == "/serving"
    assert again.train_files == ("train.gz",)  # the split whole: no validation part held out


def test_no_refit_job_past_refit_rows_without_validation_rows_or_asynchronous():
    assert refit.job(_job(refit_rows=0), PLAN, COOLED, 34_511) is None
    assert refit.job(_job(refit_rows=34_510), PLAN, COOLED, 34_511) is None
    assert refit.job(_job(refit_rows=34_511), PLAN, COOLED, 34_511) is not None
    assert refit.job(_job(), PLAN, dataclasses.replace(COOLED, fit_rows=180_000),
                     200_000) is None  # past the default, 100,000
    assert refit.job(_job(validation_share=0.0), PLAN, COOLED, 34_511) is None
    assert refit.job(_job(), PLAN, COOLED, 34_511, asynchronous=True) is None
    assert refit.job(_job(), PLAN, COOLED, None) is None


def test_the_summary_keeps_the_first_fits_account_and_says_the_refit():
    first = TrainingSummary(PLAN, {"loss": 0.1}, {}, "MirroredStrategy", 2, train_seconds=8.0,
                            stopping=COOLED)
    second = TrainingSummary(dataclasses.replace(PLAN, train_steps=557, decay_steps=112),
                             {"loss": 0.09}, {"rmse": 530.0}, "MirroredStrategy", 2,
                             train_seconds=7.5)
    both = refit.merged(first, [second], 34_511, 42)
    assert both.plan == PLAN and both.stopping == COOLED and both.train == {"loss": 0.1}
    assert both.eval == {"rmse": 530.0} and both.train_seconds == 15.5
    assert both.refit == Refit(steps=557, decay_steps=112, rows=34_511, seconds=7.5, seed=42)
    assert both.refit.words() == (
        "on all 34,511 rows of the train split for 557 steps, the rate decayed to zero over "
        "the last 112 (the kept weights' epochs of the fit rows), 7.5 s: the model exported")
    assert TrainingSummary.from_dict(both.to_dict()) == both
    # A bag of two (trainer_module/bag.py): the last member's eval (the mean's), both members'
    # seconds, and the member a SIGTERM stopped (the second) as where the refit resumed.
    member = dataclasses.replace(second, eval={"rmse": 520.0}, train_seconds=7.0, resumed_at=15)
    bagged = refit.merged(first, [dataclasses.replace(second, resumed_at=557), member], 34_511, 42)
    assert bagged.eval == {"rmse": 520.0} and bagged.train_seconds == 22.5
    assert (bagged.refit.bagged, bagged.refit.resumed_at) == (2, 15)
    assert bagged.refit.words().endswith(
        "(the kept weights' epochs of the fit rows), resumed at step 15, from seeds 42 and 43, "
        "14.5 s: the mean of the 2 models exported")
    assert TrainingSummary.from_dict(bagged.to_dict()) == bagged


def test_a_bag_of_refits_on_a_small_table_each_from_its_own_seed_and_directory():
    """trainer_module/bag.py: trainer.bags refits where the train split has trainer.bag_min_rows
    to bag_rows rows, each from the next seed, beside the refit's directory; one outside."""
    again = refit.job(_job(), PLAN, COOLED, 34_511)  # its steps; the rows below decide the bag
    members = refit.members(again, 4_000)
    assert [m.trainer.seed for m in members] == [again.trainer.seed, again.trainer.seed + 1]
    assert [os.path.basename(m.model_run_dir) for m in members] == [
        "lockstep_refit", "lockstep_refit_1"]
    assert refit.members(again, 5_001) == [again] and refit.members(again, 999) == [again]
    # A model of the user's own is served as their code builds it: one refit.
    theirs = again.with_trainer(dataclasses.replace(again.trainer, model="wide_deep.model:build"))
    assert refit.members(theirs, 4_000) == [theirs]
    three = again.with_trainer(dataclasses.replace(again.trainer, bags=3, bag_min_rows=0))
    assert [m.trainer.seed for m in refit.members(three, 10)] == [42, 43, 44]
