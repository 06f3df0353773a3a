"""The run's figures in the words the summary and the page print them (pipeline/reporting/
run_report.py, page.py): a metric's value, the Trainer's input, resume, precision and
accumulation, the asynchronous cluster, the equivalence check, a TFMA threshold."""

from __future__ import annotations

import os

from trainer_module.summary import Asynchronous, TrainingSummary, Verification


def value_text(name: str, value: float) -> str:
    """A metric's value to 4 places; one TFMA gives as NaN says why where it can (precision: no
    eval row was predicted positive, so it is undefined, not zero)."""
    if value != value:  # NaN
        return "n/a" + (" (no row predicted positive)" if name.endswith("precision") else "")
    return f"{value:.4f}"


def metric_text(name: str, value: float) -> str:
    return f"{name} {value_text(name, value)}"


def input_line(t: TrainingSummary) -> str:
    """"Input: fingerprint 3f9a... (...)": what the Trainer read, so two runs can be seen to have
    read the same rows in the same order (trainer_module/input_pipeline.py, fingerprint)."""
    basis = ("the train split's row identities in the order read, the validation part, the seed"
             if not t.input_fingerprint.startswith("~") else
             "the train files' names and sizes: their ExampleGen recorded no row identities")
    return f"Input: fingerprint {t.input_fingerprint} ({basis})"


def stopping_lines(t: TrainingSummary) -> list[str]:
    """Early stopping's lines (where the validation rows stopped the fit, the examples seen) and
    the refit's on every train row (trainer_module/refit.py); [] without early stopping."""
    if not t.stopping:
        return []
    lines = [f"Early stopping: {t.stopping.words(t.plan.train_steps)}"]
    if seen := t.stopping.seen_words():
        lines.append(f"Seen: {seen}")
    if t.refit:
        lines.append(f"Refit: {t.refit.words()}")
    elif none := t.stopping.no_refit_words():
        lines.append(f"Refit: {none}")
    return lines


def resume_line(t: TrainingSummary) -> str:
    """Where training resumed from (on another topology: how the global batch was kept), and the
    checkpoints it passed over because they did not read (trainer_module/controller.py)."""
    passed = ", ".join(os.path.basename(p) for p in t.unreadable_checkpoints)
    resumed = (t.resume_words() or
               f"resumed from a checkpoint at step {t.resumed_at} of an interrupted attempt"
               if t.resumed_at else "trained from the start")
    return (f"Checkpoints: {resumed}"
            + (f", passing over {passed} (did not read)" if passed else ""))


def precision_parts(t: TrainingSummary) -> list[str]:
    """The Trainer summary's accumulation and precision, where they are not the defaults, and
    float16's skipped steps: ["4 micro-batches accumulated per replica", "mixed_float16 (...)"]."""
    return [part for part in (accumulation_text(t), precision_text(t)) if part]


def accumulation_text(t: TrainingSummary) -> str:
    """"4 micro-batches of 32 accumulated per replica", or "" without accumulation."""
    if t.plan.accumulation_steps <= 1:
        return ""
    return (f"{t.plan.accumulation_steps} micro-batches of {t.plan.per_replica_batch} "
            "accumulated per replica")


def precision_text(t: TrainingSummary) -> str:
    """"mixed_float16 (loss scaling skipped ...)", or "" in float32."""
    if t.plan.precision == "float32":
        return ""
    logs = t.train
    skipped = (f" (loss scaling skipped {logs['skipped_steps']:g} step(s) on overflow, scale "
               f"{logs.get('loss_scale', 0):g})" if "skipped_steps" in logs else "")
    return f"{t.plan.precision}{skipped}"


def asynchronous_text(a: Asynchronous) -> str:
    """A parameter-server run's cluster and staleness (train.py, `asynchronous` in the summary):
    "2 workers, 1 parameter server, 400 updates, staleness mean 0.70 max 16 (...)"."""
    return (f"{a.workers} worker(s), {a.parameter_servers} parameter server(s), "
            f"{a.updates} updates, staleness mean {a.staleness_mean:.2f} max "
            f"{a.staleness_max} (updates by other workers between a worker's read of the "
            "weights and its own update)")


def verify_line(v: Verification) -> str:
    """trainer.verify's figures (trainer_module/equivalence.py) in one line."""
    return (f"Verify: {v.replicas} replicas equal one device on global batch "
            f"{v.global_batch} over {v.steps} steps: largest weight difference "
            f"{v.max_difference:.1e} ({v.variable}) beside {v.moved:.1e} moved, "
            f"{v.relative:.1e} {'within' if v.passed else 'BEYOND'} {v.tolerance:.0e}")



def bound_in_words(threshold) -> str:
    """A TFMA MetricThreshold in words: its value bounds, or its change against the baseline."""
    parts = []
    value = threshold.value_threshold
    if value.HasField("lower_bound"):
        parts.append(f"at least {value.lower_bound.value:g}")
    if value.HasField("upper_bound"):
        parts.append(f"at most {value.upper_bound.value:g}")
    from tensorflow_model_analysis.proto import config_pb2

    change = threshold.change_threshold
    if change.HasField("absolute"):
        parts.append(f"a change against the baseline of at least {change.absolute.value:g}"
                     if change.direction == config_pb2.MetricDirection.HIGHER_IS_BETTER else
                     f"a change against the baseline of at most {change.absolute.value:g}")
    return " and ".join(parts) or "its threshold"
