"""The decisions taken once before a run, from the config and (when it is read) the data: the
task, what each column is to the model, and the evaluation's gate. They are recorded here, typed,
never written back into the user's config; the pipeline definition takes them whole.
"""

from __future__ import annotations

import dataclasses

from components.fs import is_uri
from pipeline import column_roles, evaluation
from pipeline.config import Config, ConfigError
from pipeline.column_roles import CONSTANT, FEATURE, HASHED, ID, TIMESTAMP, UNIQUE_TEXT
from trainer_module.settings import REGRESSION
from trainer_module.custom_config import TransformSpec
from trainer_module.features import MAX_VOCABULARY, MIN_COUNT, YMD, hashed_vocab_name, vocab_name
from runtime import exit_status
from trainer_module.hook_paths import LOSS_KEY, MODEL_KEY, PREPROCESSING_KEY, HookError


@dataclasses.dataclass(frozen=True)
class Decisions:
    task: str
    task_reason: str
    gate: evaluation.Gate
    roles: dict[str, column_roles.Role] = dataclasses.field(default_factory=dict)
    min_count: int = MIN_COUNT  # data.min_count and data.max_vocabulary (pipeline/config.py)
    max_vocabulary: int = MAX_VOCABULARY

    def transform_spec(self, label: str) -> TransformSpec:
        return TransformSpec(label, self.task, tuple(column_roles.excluded(self.roles)),
                             tuple(column_roles.timestamps(self.roles)),
                             timestamp_orders=column_roles.timestamp_orders(self.roles),
                             hashed=tuple(column_roles.hashed(self.roles)),
                             large=tuple(column_roles.large(self.roles)),
                             coded=tuple(column_roles.coded(self.roles)),
                             min_count=self.min_count, max_vocabulary=self.max_vocabulary)

    def column_lines(self) -> list[str]:
        """What the run says first about the columns: those that are not plain features."""
        lines = []
        for role, verb in ((ID, "left out as ids"), (CONSTANT, "left out as constants"),
                           (UNIQUE_TEXT, "left out as near-unique text"), (HASHED, "hashed"),
                           (TIMESTAMP, "parsed as timestamps")):
            named = [f"'{name}' ({r.why})" for name, r in self.roles.items() if r.role == role]
            if named:
                lines.append(f"lockstep: columns {verb}: {'; '.join(named)}")
        large = [f"'{name}': {self.roles[name].why}" for name in column_roles.large(self.roles)]
        if large:
            lines.append(f"lockstep: large categorical columns: {'; '.join(large)}")
        coded = [f"'{name}' ({self.roles[name].why})" for name in column_roles.coded(self.roles)]
        if coded:
            lines.append("lockstep: float columns also embedded as codes (data.columns = {column = "
                         f"\"feature\"}} keeps one a number only): {'; '.join(coded)}")
        features = sum(r.role in (FEATURE, HASHED, TIMESTAMP) for r in self.roles.values())
        if lines:
            lines.append(f"lockstep: {features} of {len(self.roles)} columns are features "
                         "(data.columns overrides: {column = \"feature\"})")
        return lines

    def gate_line(self) -> str:
        return ("lockstep: a model is blessed with "
                + "; ".join([f"{b.metric} {b.words()}" for b in self.gate.bounds]
                            + ([self.gate.reference_words()] if self.gate.beat_reference else []))
                + f" on the eval split (gating metric {self.gate.metric}"
                + ("; each naive figure in brackets is measured on the whole table, before the "
                   "split" if self.gate.naive_measured() else "") + ")")


def decide(config: Config, data=None) -> Decisions:
    """data: the check's DataInfo (pipeline/data_check.py), or None when the data is not read
    (remote data at compile: the task, the roles and the bounds come from the config alone)."""
    if data is None:
        if config.data.task == "auto":
            raise ConfigError(f"data.path {config.data.path} is remote and compile reads no "
                              "remote data: set data.task to classification or regression")
        roles = {}
        for name, value in config.data.columns.items():
            try:
                role, order = column_roles.parse_override(name, value)
            except ValueError as err:
                raise ConfigError(str(err)) from None
            roles[name] = column_roles.Role(role, "set by data.columns",
                                            order or (YMD if role == TIMESTAMP else ""))
        task, reason = config.data.task, "set by --task or data.task"
        gate = evaluation.decide(config.eval, task, where=config.data.path)
    else:
        roles, task, reason = data.roles, data.task, data.task_reason
        gate = evaluation.decide(config.eval, task, data.label_counts, data.label_std,
                                 where=config.data.path)
    for column in config.eval.slices:
        if data is not None and column not in data.columns:
            raise ConfigError(f"eval.slices: '{column}' is not a column of {config.data.path} "
                              f"(columns: {', '.join(data.columns)})")
    return Decisions(task, reason, gate, roles, config.data.min_count, config.data.max_vocabulary)


def check_hooks(config: Config, decisions: Decisions, data=None) -> list[str]:
    """Imports the user's own code the config names (trainer_module/hooks.py) and checks it:
    each hook's signature; the loss gives one loss per example; the model maps a batch of the
    transformed features to [batch, outputs] (checked here when the features are the built-in
    preprocessing's of local data; otherwise in the Trainer, before it trains, and by `lockstep
    verify`). Returns what the run says about them. Raises ConfigError, one line, naming the key."""
    from trainer_module import hooks

    if not (config.trainer.model or config.trainer.loss or config.transform.preprocessing_fn):
        return []
    _load_tensorflow_quietly()  # before the user's code imports it
    trainer = config.trainer
    outputs = 1 if decisions.task == REGRESSION else max(len((data and data.label_counts) or {}), 2)
    checked = []
    try:
        if config.transform.preprocessing_fn:
            hooks.load(PREPROCESSING_KEY, config.transform.preprocessing_fn, 1)
            checked.append(f"{PREPROCESSING_KEY} = {config.transform.preprocessing_fn}")
        if trainer.loss:
            hooks.check_loss(hooks.load(LOSS_KEY, trainer.loss, 2), decisions.task, outputs)
            checked.append(f"{LOSS_KEY} = {trainer.loss} (one loss per example)")
        if trainer.model:
            model = hooks.load(MODEL_KEY, trainer.model, 1)
            how = "its signature; its output once Transform has run"
            if data is not None and not config.transform.preprocessing_fn:
                inputs = _builtin_inputs(config, decisions, data, outputs)
                hooks.check_model(model(inputs), inputs)
                how = f"[batch, {outputs}] from {len(inputs.feature_spec)} transformed features"
            checked.append(f"{MODEL_KEY} = {trainer.model} ({how})")
    except HookError as err:
        raise ConfigError(str(err)) from None
    return [f"lockstep: your code: {'; '.join(checked)}"]


def _load_tensorflow_quietly() -> None:
    """Imports TensorFlow with fd 2 on /dev/null: its C++ start-up lines ("Unable to register
    cuFFT factory ...", logged as errors, so TF_CPP_MIN_LOG_LEVEL=2 lets them through) would
    otherwise come before lockstep's own lines, and before a one-line error about the user's
    code. A user who asks for TensorFlow's logs (TF_CPP_MIN_LOG_LEVEL 0 or 1) gets them. It imports
    without the cycle collector (runtime/processes.py, `imports_uncollected`): this is the
    start of a process that checks the user's code (`lockstep run`, `lockstep verify`)."""
    import os
    import sys

    from runtime import processes

    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") in ("0", "1"):
        return
    sys.stderr.flush()
    saved = os.dup(2)
    quiet = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(quiet, 2)
        with processes.imports_uncollected():
            import tensorflow  # noqa: F401 - imported for the fork, uncollected
    finally:
        os.dup2(saved, 2)
        os.close(saved), os.close(quiet)


def _builtin_inputs(config: Config, decisions: Decisions, data, outputs: int):
    from trainer_module import hooks, preprocessing

    features = {name: kind for name, kind in data.columns.items()
                if name != config.data.label and name not in column_roles.excluded(decisions.roles)}
    spec = preprocessing.builtin_feature_spec(features, column_roles.timestamps(decisions.roles),
                                              column_roles.coded(decisions.roles))
    hashed = column_roles.hashed(decisions.roles) + column_roles.large(decisions.roles)
    vocabularies = {(hashed_vocab_name(name) if name in hashed else vocab_name(name)): 1
                    for name, kind in features.items() if kind == "string"}
    return hooks.ModelInputs(spec, vocabularies, decisions.task, outputs, config.trainer)


def check_local(config: Config):
    """The check before a run of local data (pipeline/data_check.py), with this config's data
    settings; None for remote data, which is not read here."""
    if is_uri(config.data.path):
        return None
    from pipeline import data_check

    return data_check.check(config.data)


def check_skew(config: Config, data, decisions: Decisions):
    """How the train and eval rows compare (pipeline/split_check.py), or None for remote data or
    data.max_skew 0. Raises SkewError, naming the columns and scores, past the bound."""
    if data is None or data.split_tally is None:
        return None
    from pipeline import split_check

    check = split_check.measure(data.split_tally, data.columns, decisions.roles,
                                config.data.label, decisions.task, config.data.max_skew)
    split_check.refuse_beyond(check)
    return check


def nothing_new(config: Config, data) -> str | None:
    """For data in spans: the one line to say, when the complete spans this run would read are
    exactly those the serving model was trained on (the same files, unchanged), else None. A span
    still being uploaded is not read, so it is nothing new."""
    if data is None or not data.spans:
        return None
    from components import spans

    number, record = _serving_record(config.paths.serving_dir)
    trained = (record or {}).get("data") or {}
    if not trained.get("fingerprint") or trained["fingerprint"] != spans.fingerprint(data.files):
        return None
    return (f"lockstep: no new complete span since the serving model (version {number}, "
            f"trained on span(s) {', '.join(map(str, trained['spans']))}): nothing to train or "
            "push (--force runs anyway)")


@dataclasses.dataclass(frozen=True)
class DriftCheck:
    """How far the newest complete span moved from the one before it, column by column
    (pipeline/drift.py), largest first; what the run says and the report shows."""

    previous: int
    newest: int
    drifts: tuple  # drift.Drift
    max_drift: float

    def line(self) -> str:
        top = ", ".join(f"{x.column} {x.measure} {x.score:.3f}" for x in self.drifts[:3])
        return (f"lockstep: drift from span {self.previous} to span {self.newest} within "
                f"{self.max_drift:g}: largest {top or 'none measured'}")

    def to_dict(self) -> dict:
        return {"previous": self.previous, "newest": self.newest, "max_drift": self.max_drift,
                "columns": [dataclasses.asdict(x) for x in self.drifts]}


def check_drift(config: Config, data) -> DriftCheck | None:
    """For data in spans: how far the newest complete span moved from the one before it (None
    when there is no earlier span or data.max_drift is 0). Raises DriftError, naming the columns
    and scores, when a feature moved past its bound."""
    if data is None or not data.spans or not config.data.max_drift:
        return None
    from pipeline import drift

    found = drift.between_spans(data, config.data)
    if found is None:
        return None
    (previous, newest), drifts = found
    beyond = [x for x in drifts if x.beyond]
    if beyond:
        raise DriftError(f"data drift from span {previous} to span {newest}: "
                         + ", ".join(x.words() for x in beyond)
                         + " (data.max_drift, data.feature_drift); nothing was run")
    return DriftCheck(previous, newest, tuple(drifts), config.data.max_drift)


def check_serving_target(config: Config, decisions: Decisions) -> None:
    """Raises ConfigError where the serving model answers another label or task than this run's
    (components/serving_versions.py, check_target): before anything runs, not in the Evaluator."""
    from components import serving_versions

    number, record = _serving_record(config.paths.serving_dir)
    try:
        serving_versions.check_target(config.paths.serving_dir, number, record,
                                      serving_versions.target(config.data.label, decisions.task))
    except serving_versions.OtherTarget as err:
        raise ConfigError(str(err)) from None


def _serving_record(serving: str) -> tuple[int | None, dict | None]:
    """The serving version's number and push record. A local serving dir is read with the
    standard library (the check runs before TensorFlow loads, which would talk on the terminal):
    the newest version with its record, which a push writes last. Remote: components/serving_versions.py."""
    from components import serving_versions

    if is_uri(serving):
        version = serving_versions.serving_version(serving)
        return (version.number, version.record) if version else (None, None)
    import json
    import os

    if not os.path.isdir(serving):
        return None, None
    for name in sorted((n for n in os.listdir(serving) if n.isdigit()), key=int, reverse=True):
        path = os.path.join(serving, name, serving_versions.PUSH_RECORD)
        try:
            with open(path) as handle:
                return int(name), json.load(handle)
        except (OSError, ValueError):
            continue
    return None, None


class DriftError(ValueError):
    """A feature's distribution moved past its bound between spans; the message names it."""

    lockstep_exit_status = exit_status.INPUT
