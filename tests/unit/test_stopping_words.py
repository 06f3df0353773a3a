"""What the summary says of early stopping (trainer_module/summary.py, Stopping): the stop, the
cooldown where validation stopped improving, and how much of the table the model saw."""

from trainer_module.summary import Stopping


def test_a_cooldown_is_said_with_where_validation_stopped_improving_and_how_much_was_seen():
    stopping = Stopping(stopped_at=1_000, best_step=1_000, validation_loss=0.0003321,
                        validation_rows=19_816, steps_per_epoch=977, every=50,
                        stopped_early=True, cooled_from=850, fit_rows=249_942, global_batch=256)
    assert stopping.words(7_813) == (
        "validation stopped improving at step 850 (epoch 0.9), the rate decayed to zero over 150 "
        "steps from there: stopped at step 1,000 (epoch 1.0) of 7,813, kept step 1,000 (epoch "
        "1.0): validation loss 0.0003321 on 19,816 rows held out of the train split")
    assert stopping.seen_words() == ("trained on 256,000 examples: 1.0 epochs of 249,942 fit "
                                     "rows; stopped when validation stopped improving")


def test_a_large_table_seen_in_part_says_the_share_and_a_run_to_its_end_says_so():
    part = Stopping(stopped_at=4_800, best_step=4_500, validation_loss=0.2, validation_rows=20_000,
                    stopped_early=True, fit_rows=3_030_000, global_batch=256)
    assert part.seen_words() == ("trained on 1,228,800 examples: 0.41 epochs of 3,030,000 fit "
                                 "rows; stopped when validation stopped improving")
    assert part.words(7_813).startswith(
        "stopped early at step 4,800 (epoch 0.4) of 7,813, kept step 4,500 (epoch 0.4)")
    whole = Stopping(stopped_at=400, best_step=400, validation_loss=0.02, validation_rows=26,
                     fit_rows=259, global_batch=32)
    assert whole.seen_words().endswith("49.4 epochs of 259 fit rows; the planned steps ran out first")
    # A summary written before the rows were recorded says nothing of them.
    assert Stopping(stopped_at=400, best_step=300, validation_loss=0.02,
                    validation_rows=26).seen_words() == ""


def test_averaged_weights_are_said_with_the_steps_they_average_over():
    averaged = Stopping(stopped_at=1_000, best_step=900, validation_loss=0.25,
                        validation_rows=3_466, stopped_early=True, fit_rows=31_045,
                        global_batch=256, averaged=0.99)
    assert averaged.words(2_697) == (
        "stopped early at step 1,000 (epoch 8.2) of 2,697, kept step 900 (epoch 7.4), the "
        "weights' average over about 100 steps: validation loss 0.25 on 3,466 rows held out of "
        "the train split")
