"""GradientBoostingReference: what LightGBM, with its defaults, reaches on this run's split, so the
model's eval figure has a strong stock model beside it, and one that is checked.

It fits LGBMClassifier (or LGBMRegressor) on the ExampleGen's train rows, scores it on
every labeled eval row with the Evaluator's metrics (components/generalization.py's definitions:
the label's classes indexed by their train frequency, so a binary label's positive class is the
rarer one, as the label vocabulary makes it; AUC from the ranks of the scores; an eval row whose
label is missing or not a train class counts in no metric, as the Evaluator weighs it 0), and
writes the figures as the artifact's one file, REFERENCE_FILE (`Reference`), with the library's
name and version. A fit is checked before it is scored: one whose train loss rose (boosting
diverged: on openintro's loans, a 7-class label that interest_rate nearly separates, the train
log-loss fell to 0.07 by tree 22 and rose to 23.5 by tree 100, for eval accuracy 0.34; scikit-
learn's HistGradientBoosting, the reference before, diverged there too, 0.38 at tree 12 and 8.3
at tree 100, and the summary gave its 0.75 as gradient boosting's figure), or that ends no lower
than the naive baseline on its own train rows, is recorded as not measured, with the figures
that say why, never as the booster's figure. On the same splits of 11 other tables LightGBM's
figures are HistGradientBoosting's within 0.01 (docs/evaluation.md), its fit and scoring as fast
or faster.

The columns are the run's (the Transform's custom config, trainer_module/settings.py
TransformSpec): the label and the columns the run leaves out are not features; numbers are
numbers; text (hashed and timestamp text too) becomes codes in the sorted order of its train
values (an ISO timestamp's is its time order), categorical where a column has at most
MAX_CATEGORIES values, an ordinal number otherwise; a value unseen in train is missing.

Rows come from the ExampleGen's columnar copy of each TFRecord file
(components/columnar_examples.py): no record is decoded, no Python runs per row. Past ROW_CAP
labeled train rows it fits a sample of them chosen by what the rows hold (the figures say so;
components/row_sample.py), on one thread (THREADS):
beside the Trainer it takes one core at most (two OpenMP threads on two busy cores spin: 44 s
for a 2.7 s fit).

It informs, and never fails a run for what the data is: a split it cannot fit or score (one
class, no labeled row, no feature with a value) is recorded as not measured, with the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components import columnar_examples, fit_check, fs, generalization, row_sample
from components.columnar_examples import cells as _cells  # a copy's one-value lists as values
from trainer_module.settings import REGRESSION
from trainer_module.custom_config import TransformSpec

REFERENCE_FILE = "reference.json"
# Labeled train rows fitted at most; past them, a random sample of this many. On one thread, on
# nycflights13 (17 columns, 3 classes, 67,018 eval rows): 50,000 rows fit in 2.4 s and the whole
# reference takes 5.8 CPU-s (scoring the eval split: 2.5 of them), 100,000 in 4.0 s and 7.4 CPU-s,
# for the same accuracy (0.9999).
ROW_CAP = 50_000
THREADS = 1  # OpenMP threads
MAX_CATEGORIES = 255  # at most this many categories a column (LightGBM's max_bin); past it, ordinal
SEED = 0


@functools.cache
def library() -> str:
    """What fits the reference, and its version ("LightGBM 4.7.0"): the summary and report name
    it. Asked where a reference is made, not as this module loads (the CLI imports it: reading
    the installed packages' metadata took 78 ms)."""
    from importlib import metadata

    return f"LightGBM {metadata.version('lightgbm')}"


@dataclasses.dataclass(frozen=True)
class Reference:
    """What the reference reached: `metrics` by pipeline/evaluation.py's names, on `eval_rows`
    labeled eval rows, fitted on `train_rows` of the `labeled_train_rows` train rows with a label
    in `fit_seconds`; or, with no metrics, `not_measured`: why."""

    metric: str  # the run's gating metric
    metrics: dict[str, float]
    train_rows: int = 0
    labeled_train_rows: int = 0
    eval_rows: int = 0
    fit_seconds: float = 0.0
    not_measured: str = ""
    library: str = ""  # the booster and its version ("LightGBM 4.7.0"); "": an older record

    @property
    def sampled(self) -> bool:
        return self.train_rows < self.labeled_train_rows

    @property
    def value(self) -> float | None:
        """The gating metric's figure, or None."""
        return self.metrics.get(self.metric)

    def words(self) -> str:
        """"auc 0.9012 (fit on 41,536 train rows in 0.8 s)", or "not measured: <why>"."""
        if self.value is None:
            return f"not measured: {self.not_measured or f'no {self.metric}'}"
        rows = (f"a sample of {self.train_rows:,} of {self.labeled_train_rows:,} train rows"
                if self.sampled else f"{self.train_rows:,} train rows")
        return f"{self.metric} {self.value:.4f} (fit on {rows} in {self.fit_seconds:.1f} s)"

    @property
    def name(self) -> str:
        """The library that fitted it ("LightGBM 4.7.0"), or "gradient boosting" for an older
        record, which does not say."""
        return self.library or "gradient boosting"

    def booster(self) -> str:
        """What fitted it, as the summary's line names it: "LightGBM 4.7.0 (its defaults)"."""
        return f"{self.library} (its defaults)" if self.library else self.name

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Reference":
        names = {f.name for f in dataclasses.fields(cls)}
        if set(values) - names or "metric" not in values or "metrics" not in values:
            raise ValueError(f"{REFERENCE_FILE}: expected the keys {sorted(names)}, got "
                             f"{sorted(values)}")
        return cls(**values)


class NotMeasured(ValueError):
    """The split cannot be fitted or scored; the message says why, in words."""


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    numbers = pc.cast(column, pa.float64())
    if isinstance(numbers, pa.ChunkedArray):
        return numbers.to_numpy()  # nulls as NaN
    return numbers.to_numpy(zero_copy_only=False)


def _is_text(column: pa.ChunkedArray) -> bool:
    kind = column.type
    return (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind))


def _sorted_values(column: pa.ChunkedArray) -> pa.Array:
    values = pc.unique(column).drop_null()
    return pc.take(values, pc.array_sort_indices(values))


def _codes(column: pa.ChunkedArray, values: pa.Array) -> np.ndarray:
    """Each cell's place among `values` (NaN: missing, or not among them)."""
    return _numbers(pc.index_in(column, value_set=values))


def features(train: pa.Table, evaluation: pa.Table, names: list[str]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train matrix, eval matrix, categorical mask): numbers as numbers, text as codes by its
    train values (categorical up to MAX_CATEGORIES values); a column with no value in the train
    rows is left out. Raises NotMeasured when none is left."""
    train_columns, eval_columns, categorical = [], [], []
    for name in names:
        fit = _cells(train.column(name))
        score = (_cells(evaluation.column(name)) if name in evaluation.column_names
                 else pa.chunked_array([pa.nulls(evaluation.num_rows, fit.type)]))
        if fit.null_count == len(fit):
            continue
        if _is_text(fit):
            values = _sorted_values(fit)
            train_columns.append(_codes(fit, values))
            eval_columns.append(_codes(score.cast(fit.type), values))
            categorical.append(len(values) <= MAX_CATEGORIES)
        else:
            train_columns.append(_numbers(fit))
            eval_columns.append(_numbers(score))
            categorical.append(False)
    if not categorical:
        raise NotMeasured("no feature column has a value in the train split")
    return np.column_stack(train_columns), np.column_stack(eval_columns), np.array(categorical)


def _classes(labels: pa.ChunkedArray) -> pa.Array:
    """The label's values in the train rows, most frequent first, as the label vocabulary orders
    them (a binary label's index 1, the positive class, is the rarer one)."""
    counts = pc.value_counts(labels.drop_null())
    values = counts.field("values")
    ranks = np.argsort(np.asarray(pc.array_sort_indices(values)))  # a tie goes by the value
    order = np.lexsort((ranks, -counts.field("counts").to_numpy()))
    return pc.take(values, pa.array(order))


def _in_order(train: pa.Table, rows: np.ndarray) -> np.ndarray:
    """The rows in an order by every column (components/row_sample.py): like the sample, it does
    not depend on the file of the split each row is in (the ExampleGen's shards differ from run
    to run), so the same rows give the same fit and the same figures."""
    kept = train.take(pa.array(rows))
    return rows[row_sample.canonical_order({name: _cells(kept.column(name))
                                            for name in kept.column_names})]


def measure(train: pa.Table, evaluation: pa.Table, label: str, task: str, metric: str,
            excluded=(), rows: int = ROW_CAP, threads: int = THREADS,
            labels: pa.ChunkedArray | None = None) -> Reference:
    """Fits LightGBM (defaults, random_state 0) on the labeled train rows (a sample of `rows`
    past that many, by the rows' hashes) and scores it on the labeled eval rows.

    Args:
      train, evaluation: the splits' columns (the columnar copy's one-value lists, or flat).
      label, task: the run's; metric: its gating metric (pipeline/evaluation.py's name).
      excluded: the columns the run leaves out (ids, constants).
      labels: every train row's label where `train` is a sample already (read_sample).
    Returns:
      the Reference; not measured (with the reason) where the data allows no fit or no score.
    """
    try:
        return _measure(train, evaluation, label, task, metric, excluded, rows, threads, labels)
    except NotMeasured as why:
        return Reference(metric, {}, not_measured=str(why), library=library())


def _measure(train, evaluation, label, task, metric, excluded, rows, threads, labels) -> Reference:
    from threadpoolctl import threadpool_limits

    if label not in train.column_names:
        raise NotMeasured(f"no label column '{label}' in the train split")
    regression = task == REGRESSION
    if labels is None:  # the whole split: sampled here as the component samples its files
        whole = train
        train, labels = row_sample.sample_files(
            lambda: iter([whole]), label, lambda cells: _labeled(cells, regression), rows, _cells)
    truth, every = _cells(train.column(label)), _cells(labels)
    if regression:
        if _is_text(every):
            raise NotMeasured(f"the label '{label}' holds text")
        y = _numbers(truth)
    else:
        classes = _classes(every)
        if len(classes) < 2:
            raise NotMeasured(f"{len(classes)} class(es) in the train split's labels")
        y = _numbers(pc.index_in(truth, value_set=classes))
    labeled, labeled_total = np.flatnonzero(np.isfinite(y)), int(_labeled(every, regression).sum())
    if not len(labeled):
        raise NotMeasured("no labeled train rows")
    fitted = _in_order(train, labeled)
    train = train.take(pa.array(fitted))
    y = y[fitted]
    if not regression and len(np.unique(y)) < 2:
        raise NotMeasured("one class in the sampled train rows")
    eval_truth = (_cells(evaluation.column(label)) if label in evaluation.column_names
                  else pa.chunked_array([pa.nulls(evaluation.num_rows, truth.type)]))
    if regression:
        eval_y = _numbers(eval_truth)
    else:
        eval_y = _numbers(pc.index_in(eval_truth.cast(truth.type), value_set=classes))
    scored = np.isfinite(eval_y)
    if not scored.any():
        raise NotMeasured("no labeled eval rows" + ("" if regression else " of a train class"))
    names = [n for n in train.column_names if n != label and n not in set(excluded)]
    x_train, x_eval, categorical = features(train, evaluation, names)
    x_eval, eval_y = x_eval[scored], eval_y[scored]
    with threadpool_limits(limits=threads, user_api="openmp"):
        model, losses, seconds = _fit(x_train, y, categorical, regression, threads)
        failed = fit_check.failed(losses, y, regression)
        if failed:
            raise NotMeasured(f"{library()}'s default fit {failed}")
        if regression:
            outputs = {"predictions": model.predict(x_eval)}
        else:
            probabilities = np.zeros((len(x_eval), len(classes)))
            probabilities[:, model.classes_.astype(np.int64)] = model.predict_proba(x_eval)
            outputs = {"probabilities": probabilities}
    figures = generalization.metrics({**outputs, "label": eval_y, "weight": np.ones(len(eval_y))})
    return Reference(metric, figures, len(fitted), labeled_total, len(eval_y), round(seconds, 3),
                     library=library())


def _fit(x_train: np.ndarray, y: np.ndarray, categorical: np.ndarray, regression: bool,
         threads: int):
    """(LightGBM with its defaults fitted on the train rows, its train loss after each tree, the
    fit's seconds): the train rows are its evaluation set too, which LightGBM scores as it adds
    each tree (the loss it minimizes: l2, or the log-loss)."""
    import lightgbm

    model_class = lightgbm.LGBMRegressor if regression else lightgbm.LGBMClassifier
    model = model_class(random_state=SEED, n_jobs=threads, verbose=-1)
    tic = time.perf_counter()
    model.fit(x_train, y, categorical_feature=[int(i) for i in np.flatnonzero(categorical)],
              eval_X=(x_train,), eval_y=(y,), eval_names=["train"])
    seconds = time.perf_counter() - tic
    [losses] = model.evals_result_["train"].values()
    return model, np.asarray(losses, np.float64), seconds


def _labeled(labels: pa.ChunkedArray, regression: bool) -> np.ndarray:
    """Which rows have a label (a number, for a regression)."""
    if regression:
        return np.isfinite(_numbers(labels)) if not _is_text(labels) else np.zeros(len(labels), bool)
    return np.asarray(labels.is_valid())


def _tables(examples, split: str):
    """The split's files' rows, a table a file, from their columnar copies. Raises NotMeasured
    where a file has none (examples written before the ExampleGen wrote copies)."""
    records = sorted(fs.glob(f"{artifact_utils.get_split_uri([examples], split)}/*"))
    if not records:
        raise NotMeasured(f"the {split} split has no file")
    for record in records:
        found = columnar_examples.table(record)
        if found is None:
            raise NotMeasured(f"{record} has no columnar copy")
        yield found


def read_split(examples, split: str) -> pa.Table:
    """The split's rows from the columnar copies of its files (NotMeasured: _tables)."""
    return pa.concat_tables(list(_tables(examples, split)), promote=True)


def read_sample(examples, label: str, task: str) -> tuple[pa.Table, pa.ChunkedArray]:
    """(ROW_CAP of the train split's labeled rows, by their hashes; every train row's label),
    read a file at a time (components/row_sample.py)."""
    return row_sample.sample_files(lambda: _tables(examples, "train"), label,
                                   lambda labels: _labeled(labels, task == REGRESSION), ROW_CAP,
                                   _cells)


class GradientBoostingReferenceSpec(ComponentSpec):
    PARAMETERS = {
        # The run's columns: the Transform's custom config (TransformSpec), as JSON.
        "columns": ExecutionParameter(type=str),
        "metric": ExecutionParameter(type=str),  # the run's gating metric
    }
    INPUTS = {"examples": ChannelParameter(type=standard_artifacts.Examples)}
    # A ModelEvaluation (the reference model's, REFERENCE_FILE): a type every orchestrator knows
    # (a type of our own would be imported by its KFP schema title, a one-dot path).
    OUTPUTS = {"reference": ChannelParameter(type=standard_artifacts.ModelEvaluation)}


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        out = artifact_utils.get_single_instance(output_dict["reference"])
        spec = TransformSpec.from_custom_config(json.loads(exec_properties["columns"]))
        metric = exec_properties["metric"]
        try:
            train, labels = read_sample(examples, spec.label, spec.task)
            found = measure(train, read_split(examples, "eval"), spec.label, spec.task, metric,
                            spec.excluded, labels=labels)
        except NotMeasured as why:
            found = Reference(metric, {}, not_measured=str(why), library=library())
        except Exception as err:  # noqa: BLE001  it informs: a failure to measure is recorded
            logging.exception("The gradient-boosting reference failed")
            found = Reference(metric, {}, not_measured=f"{type(err).__name__}: {err}",
                              library=library())
        fs.makedirs(out.uri)
        fs.write_text(fs.join(out.uri, REFERENCE_FILE), json.dumps(found.to_dict()))
        logging.info("Gradient-boosting reference: %s", found.words())


def read(uri: str) -> Reference | None:
    """The Reference written at the artifact `uri`, or None where there is none."""
    path = fs.join(uri, REFERENCE_FILE)
    return Reference.from_dict(json.loads(fs.read_text(path))) if fs.exists(path) else None


class GradientBoostingReference(base_component.BaseComponent):
    SPEC_CLASS = GradientBoostingReferenceSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, examples: types.BaseChannel, columns: TransformSpec, metric: str):
        super().__init__(spec=GradientBoostingReferenceSpec(
            examples=examples, columns=json.dumps(columns.to_custom_config(), sort_keys=True),
            metric=metric, reference=types.Channel(type=standard_artifacts.ModelEvaluation)))
