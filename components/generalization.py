"""The generalisation gap: the trained model's metrics on a sample of the train split beside the
same metrics on the eval split, computed the same way, on the served signatures.

A model scores better on the rows it learned from; a large gap is overfitting, or a split that is
not random (rows of one group, or one answer, on one side: components/row_split.py). The serving
check's process (components/serving_check.py) computes these beside TFMA, from the model's own
`serving_default` (the scores a server gives) and `transform_features` (the label as the model
sees it, and whether the example has one), so the figures are what a user of the served model
gets. Vectorized: numpy over whole batches.
"""

from __future__ import annotations

import numpy as np

FIGURES_KEY = "generalization"  # on the blessing: JSON of measure()'s figures
SAMPLE_ROWS = 10_000  # rows of each split scored, spread over the whole split
BATCH = 4096
EPSILON = 1e-7  # probabilities clipped as Keras clips them


def sample(files: list[str], total: int | None, rows: int = SAMPLE_ROWS) -> list[bytes]:
    """About `rows` serialized records spread evenly over the split (every k-th record), so a
    split sorted by time or by file is sampled from end to end."""
    import tensorflow as tf

    if not files:
        return []
    step = max(1, (total or 0) // rows)
    records = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP",
                                      num_parallel_reads=1).shard(step, 0).take(rows)
    return [r for batch in records.batch(BATCH) for r in batch.numpy()]


def score(model, records: list[bytes], label_key: str, weight_key: str) -> dict[str, np.ndarray]:
    """{label, weight, and the serving outputs} of the records, batch by batch."""
    import tensorflow as tf

    parts: dict[str, list[np.ndarray]] = {}
    serve = model.signatures["serving_default"]
    transform = model.signatures["transform_features"]
    for start in range(0, len(records), BATCH):
        batch = tf.constant(records[start:start + BATCH])
        outputs = {**{k: v for k, v in serve(examples=batch).items() if k != "classes"},
                   **transform(examples=batch)}
        for name, value in outputs.items():
            parts.setdefault(name, []).append(value.numpy())
    found = {name: np.concatenate(values) for name, values in parts.items()}
    found["label"] = found.pop(label_key).reshape(-1)
    found["weight"] = found.pop(weight_key).reshape(-1)
    return found


def _auc(truth: np.ndarray, scores: np.ndarray) -> float:
    """The Mann-Whitney AUC, ties counted half (components/metrics.py's ExactAUC, unweighted)."""
    from scipy.stats import rankdata

    positives, negatives = truth.sum(), (~truth).sum()
    if not positives or not negatives:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[truth].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def metrics(scored: dict[str, np.ndarray]) -> dict[str, float]:
    """The task's metrics (pipeline/evaluation.py names) over the labeled rows."""
    labeled = scored["weight"] > 0
    label = scored["label"][labeled]
    if not len(label):
        return {}
    if "probabilities" in scored:
        probabilities = np.clip(scored["probabilities"][labeled], EPSILON, 1 - EPSILON)
        classes = label.astype(np.int64)
        found = {"accuracy": float(np.mean(np.argmax(probabilities, axis=1) == classes)),
                 "log_loss": float(-np.mean(np.log(probabilities[np.arange(len(classes)),
                                                                 classes])))}
        if probabilities.shape[1] == 2:
            found["auc"] = _auc(classes == 1, probabilities[:, 1])
        return found
    prediction = scored["predictions"][labeled].reshape(-1).astype(np.float64)
    truth = label.astype(np.float64)
    error = prediction - truth
    spread = np.sum((truth - truth.mean()) ** 2)
    return {"rmse": float(np.sqrt(np.mean(error ** 2))), "mae": float(np.mean(np.abs(error))),
            "r2": float(1 - np.sum(error ** 2) / spread) if spread else float("nan")}


def measure(model, splits: dict[str, tuple[list[str], int | None]], label_key: str,
            weight_key: str, rows: int = SAMPLE_ROWS) -> dict:
    """{split: {rows, metrics}} for each split's sample ({split: (files, its record count)})."""
    found = {}
    for split, (files, total) in splits.items():
        scored = score(model, sample(files, total, rows), label_key, weight_key)
        found[split] = {"rows": int(np.sum(scored["weight"] > 0)), "metrics": metrics(scored)}
    return found


RELATIVE = ("log_loss", "rmse", "mae")  # their gap is a share of the eval figure


def gap(figures: dict, metric: str, higher_is_better: bool, bound: float) -> dict:
    """{metric, train, eval, gap, rows, bound, beyond, optimistic}: how much better the model does
    on the train sample than on the eval split, in the direction of better: absolute for accuracy,
    auc and r2, a share of the eval figure for log_loss, rmse and mae. `beyond`: better on train
    by more than the bound (overfitting, or a split that is not random). `optimistic`: better on
    eval by more than the bound, so the eval figure, the one the gate judges, promises more than
    rows like the train rows get (a few extreme rows that fell on the train side weigh heavily in
    rmse and log_loss, or the splits differ). {} without both figures."""
    train = figures.get("train", {}).get("metrics", {}).get(metric)
    evaluation = figures.get("eval", {}).get("metrics", {}).get(metric)
    if train is None or evaluation is None or train != train or evaluation != evaluation:
        return {}
    better = (train - evaluation) if higher_is_better else (evaluation - train)
    if metric in RELATIVE:
        better = better / evaluation if evaluation else 0.0
    return {"metric": metric, "train": train, "eval": evaluation, "gap": better,
            "rows": {s: f["rows"] for s, f in figures.items()}, "bound": bound,
            "beyond": better > bound, "optimistic": -better > bound}
