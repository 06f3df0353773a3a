"""The pipeline's configuration: one typed tree, loaded from TOML or YAML, overridden by flags.

Every knob lives here with a default that serves the bundled penguins data. A config file only
names what it changes; unknown keys are an error naming the key, so a typo never passes silently.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from components import row_split
from components.csv_format import DEFAULT_MISSING_VALUES
from components.fs import is_uri
from runtime import exit_status
from trainer_module import hook_paths, hooks
from trainer_module.features import MAX_VOCABULARY, MIN_COUNT
from trainer_module.settings import TASKS, TrainerConfig, TrainerConfigError, coerce

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_DATA = REPO_ROOT / "data" / "penguins"


class ConfigError(ValueError):
    """A config file, key or flag that cannot be used; the message names it."""

    lockstep_exit_status = exit_status.INPUT


# Keys that were replaced: the error says by what.
REPLACED_KEYS = {"eval.min_accuracy": 'eval.bounds = {accuracy = ...} (with eval.metric = "accuracy")',
                 "eval.max_rmse": 'eval.bounds = {rmse = ...}',
                 "eval.baseline_window": "the serving model: the baseline is the newest pushed "
                                         "version, scored on the same eval split"}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    path: str = str(BUNDLED_DATA)  # a CSV file, or a directory of CSVs
    label: str = "species"
    # Cells that mean "missing" (the penguins source writes NA).
    missing_values: list[str] = dataclasses.field(
        default_factory=lambda: list(DEFAULT_MISSING_VALUES))
    # The split of the rows into train and eval, in hash buckets: 4 : 1 puts 4 rows in 5 in train.
    # A row's split never depends on its label (components/row_split.py): by default a seeded
    # hash of its place (its file, its row), so repeated rows spread like a random split;
    # split_by = ["user_id"] keeps every row of a group on one side instead.
    train_buckets: int = 4
    eval_buckets: int = 1
    split_by: list[str] = dataclasses.field(default_factory=list)
    split_seed: int = 0
    # The check before the run (pipeline/split_check.py): each feature's and the label's skew
    # between the train and eval rows; one beyond this bound, and beyond what chance gives a
    # random split of these sizes, stops the run. 0: no check.
    max_skew: float = 0.1
    # Data that arrives in spans: a pattern under `path` with {SPAN} for the span number, e.g.
    # "span-{SPAN}/*.csv". Each run trains on the newest span, or the newest `span_window` spans.
    span_pattern: str = ""
    span_window: int = 1
    # A span is complete, and used, once this file is in its directory (its writer adds it
    # last). "": every span that has files, the moment they appear.
    span_marker: str = "_SUCCESS"
    # classification | regression | auto: from the label column, decided once before the run
    # (pipeline/data_check.py, task_for_label: a float or an integer label with more than 50
    # distinct values is a regression). A Kubeflow compile of remote data must name it.
    task: str = "auto"
    # What a column is to the model, overriding what the check before the run reads from the
    # data: {column = "feature" | "id" | "constant" | "hashed" | "timestamp"}. Ids and constants are left
    # out; a timestamp (ISO 8601 text) becomes year, month, day, day of week and hour.
    columns: dict[str, str] = dataclasses.field(default_factory=dict)
    # Data in spans: the newest complete span is compared with the complete span before it
    # (pipeline/drift.py: JSD of a numeric column's histograms, L-infinity of a text column's
    # value shares); a feature past its bound stops the run before anything runs. 0: no check.
    max_drift: float = 0.25
    feature_drift: dict[str, float] = dataclasses.field(default_factory=dict)  # {col = bound}
    # A large categorical column (more than 200,000 distinct values that repeat: user or item
    # ids) keeps every value seen at least min_count times, up to max_vocabulary values (the
    # most frequent); its rarer values share 1,000 hash buckets (pipeline/column_roles.py). Every
    # other column keeps at most max_vocabulary values too.
    min_count: int = MIN_COUNT
    max_vocabulary: int = MAX_VOCABULARY


@dataclasses.dataclass(frozen=True)
class TransformConfig:
    # Your own tf.Transform preprocessing_fn, by dotted path ("package.module:function",
    # trainer_module/hooks.py): function(inputs) -> {feature: tensor}, over the raw columns but the
    # label; lockstep adds the label. "": the built-in rules (trainer_module/preprocessing.py).
    preprocessing_fn: str = ""


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    # The metric the Evaluator gates on and the Pusher records: auto (auc for a binary label,
    # accuracy for more classes, rmse for a regression), or accuracy | auc | log_loss (classes),
    # rmse | mae | r2 (regression). See pipeline/evaluation.py.
    metric: str = "auto"
    # Explicit bounds by metric, e.g. {accuracy = 0.8} or {rmse = 12.5}: these win. A gated
    # metric without one must beat the naive baseline measured from the data before the run
    # (always the majority class; a constant score, AUC 0.5; predicting the class shares; the
    # label's mean) by `margin`. Remote data has no such measure: name the bound.
    bounds: dict[str, float] = dataclasses.field(default_factory=dict)
    # How far past the naive baseline a model must be: absolute for accuracy, auc, log_loss and
    # r2; a share of it for rmse (0.01: 1 % below the label's standard deviation).
    margin: float = 0.01
    # How much worse than the serving model (the newest pushed version, scored on the same eval
    # split) the gating metric may be and still be blessed.
    max_regression: float = 0.01
    # The generalisation gap: how much better the model may score on a sample of its train split
    # than on the eval split before the summary and the report name it (overfitting, or a split
    # that is not random). Absolute for accuracy, auc and r2; a share of the eval figure for
    # log_loss, rmse and mae. It does not stop the push.
    max_gap: float = 0.05
    # Gate on the gradient-boosting reference (components/gradient_boosting.py: LightGBM's
    # defaults on the same split, in every run's summary): a model whose gating metric
    # falls short of the reference's by more than `margin` (a share of it for rmse) is not
    # blessed. false: the reference informs only. A reference not measured holds nothing back.
    beat_reference: bool = False
    # Columns to slice the evaluation by (e.g. ["island"]): TFMA's metrics for each value, in the
    # run summary and `lockstep runs --json`. Thresholds stay on the whole eval split.
    slices: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class PathsConfig:
    pipeline_root: str = "runs/pipeline_root"
    serving_dir: str = "runs/serving"
    metadata: str = ""  # SQLite path; default <pipeline_root>/metadata.sqlite


@dataclasses.dataclass(frozen=True)
class PushConfig:
    # Versions kept in the serving dir: the newest N (0: keep all). Older ones are removed after
    # a push; a removed version is never pushed again (components/serving_versions.py).
    keep_versions: int = 0


@dataclasses.dataclass(frozen=True)
class RunConfig:
    # One run per pipeline root at a time: a second `lockstep run` waits this long for the lock,
    # then exits with status 3 and says who holds it since when.
    lock_wait_seconds: float = 0.0
    # A run that takes longer is stopped with status 4 (0: no limit); a hung run cannot hold the
    # lock, and so every later scheduled run, for ever.
    timeout_minutes: float = 0.0


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
    # The pipeline image (infra/Dockerfile); the tag defaults to the package version.
    image: str = "lockstep-pipeline"
    image_tag: str = ""
    # The image by digest, e.g. "sha256:3b4c...", as `podman push --digestfile` or the registry
    # reports it: every run pulls exactly these bytes, whatever the tag points to later. Wins
    # over image_tag.
    image_digest: str = ""
    host: str = ""  # the KFP API endpoint for submit/schedule (or --host, or $KF_PIPELINES_ENDPOINT)
    namespace: str = "kubeflow"
    experiment: str = "lockstep"
    service_account: str = ""  # the Kubernetes service account runs use ("": KFP's default)
    # Resources. The Trainer's accelerator comes from trainer.tpu_slice, or gpu_type/gpus.
    trainer_cpu: str = "4"
    trainer_memory: str = "16G"
    gpu_type: str = ""  # e.g. nvidia-tesla-t4 (the cloud.google.com/gke-accelerator node label)
    gpus: int = 0
    component_cpu: str = "1"
    component_memory: str = "4G"
    # KFP retries of the Trainer task (TPU and GPU nodes are often spot or preemptible): a retry
    # resumes from the task's last checkpoint. Backoff: this many seconds, doubling, at most 1 h.
    trainer_retries: int = 3
    trainer_retry_backoff_seconds: int = 60


@dataclasses.dataclass(frozen=True)
class VertexConfig:
    # A multi-host trainer.tpu_slice (v5e-16 and up) trains as a Vertex AI custom job that the
    # Trainer task submits and waits for (components/vertex_training.py); every other task stays
    # where it runs. project, region, service_account and network are run parameters too
    # (`lockstep submit --param vertex_region=...`).
    project: str = ""
    region: str = ""  # one that offers the slice's TPU VMs (v5e: us-central1, europe-west4, ...)
    service_account: str = ""  # the job's identity ("": the project's Vertex AI default)
    network: str = ""  # projects/<number>/global/networks/<name>, for VPC peering ("": none)
    api_endpoint: str = ""  # "": https://<region>-aiplatform.googleapis.com
    poll_seconds: float = 30.0  # how often the Trainer task asks how the job is doing
    resubmits: int = 3  # a job whose TPU VMs were preempted away is submitted again this often


@dataclasses.dataclass(frozen=True)
class Config:
    pipeline_name: str = "lockstep"
    enable_cache: bool = True
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    transform: TransformConfig = dataclasses.field(default_factory=TransformConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    paths: PathsConfig = dataclasses.field(default_factory=PathsConfig)
    push: PushConfig = dataclasses.field(default_factory=PushConfig)
    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    kubeflow: KubeflowConfig = dataclasses.field(default_factory=KubeflowConfig)
    vertex: VertexConfig = dataclasses.field(default_factory=VertexConfig)
    # Extra Beam pipeline args. Empty means Beam's DirectRunner in memory with one worker, the
    # fastest on small data; any arg makes TFX package itself for Beam workers (an sdist build per
    # component, seconds each) unless it also names --setup_file or --sdk_container_image.
    beam_args: list[str] = dataclasses.field(default_factory=list)

    @property
    def metadata_path(self) -> str:
        return self.paths.metadata or os.path.join(self.paths.pipeline_root, "metadata.sqlite")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _merged(obj: Any, values: dict[str, Any], where: str) -> Any:
    """A copy of the (frozen) section `obj` with `values` ({key: value or table}) in it."""
    fields = {f.name: f for f in dataclasses.fields(obj)}
    changes = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        dotted = f"{where}.{key}" if where else key
        if dotted in REPLACED_KEYS:
            raise ConfigError(f"config key '{dotted}' was replaced by {REPLACED_KEYS[dotted]}")
        if name not in fields:
            raise ConfigError(f"unknown config key '{dotted}' (known: {', '.join(sorted(fields))})")
        current = changes.get(name, getattr(obj, name))
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"config key '{dotted}' must be a table of keys")
            changes[name] = _merged(current, value, dotted)
            continue
        try:
            changes[name] = coerce(value, current, f"config key '{dotted}'")
        except TrainerConfigError as err:
            raise ConfigError(str(err)) from None
    return dataclasses.replace(obj, **changes)


def load(path: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults, then the file (TOML or YAML), then the overrides ({'trainer.train_steps': 5}).
    A relative path in the file (FILE_PATH_KEYS) is relative to the file's directory."""
    config = Config()
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        text = p.read_text()
        try:
            if p.suffix == ".toml":
                values = tomllib.loads(text)
            elif p.suffix in (".yaml", ".yml"):
                import yaml

                values = yaml.safe_load(text) or {}
            else:
                raise ConfigError(f"config file {p}: use .toml, .yaml or .yml")
        except (tomllib.TOMLDecodeError, ValueError) as err:
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(f"config file {p}: {str(err).splitlines()[0]}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"config file {p}: the top level must be a table of keys")
        try:
            config = _merged(config, values, "")
        except ConfigError as err:
            raise ConfigError(f"config file {p}: {err}") from None
        config = _beside(config, values, p.resolve().parent)
        if has_hooks(config):
            # The user's code beside their config imports by name, here and in every process a
            # run starts (Transform, the Trainer, kfp.local's tasks).
            hooks.add_code_path(p.resolve().parent)
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        head, _, leaf = dotted.rpartition(".")
        tree: dict[str, Any] = {leaf: value}
        for part in reversed(head.split(".") if head else []):
            tree = {part: tree}
        config = _merged(config, tree, "")
    validate(config)
    return config


# The keys that name a local path: a relative one in a config file is relative to that file's
# directory (as in Cargo's, pyproject's or docker-compose's files), so a config runs the same
# from any directory; a flag's is relative to the current directory.
FILE_PATH_KEYS = (("data", "path"), ("paths", "pipeline_root"), ("paths", "serving_dir"),
                  ("paths", "metadata"))


def _beside(config: Config, values: dict[str, Any], directory: Path) -> Config:
    """The config with the relative local paths the file itself gave (values) resolved against
    the file's directory; URIs, absolute paths, ~ and the defaults are left as they are."""
    for section, key in FILE_PATH_KEYS:
        given = values.get(section)
        if not isinstance(given, dict) or not (given.get(key) or given.get(key.replace("_", "-"))):
            continue
        table = getattr(config, section)
        value = getattr(table, key)
        if is_uri(value) or os.path.isabs(os.path.expanduser(value)):
            continue
        config = dataclasses.replace(config, **{section: dataclasses.replace(
            table, **{key: os.path.normpath(os.path.join(directory, value))})})
    return config


def absolutize(config: Config) -> Config:
    """The config with its local paths made absolute (artifact URIs in ML Metadata must not
    depend on the cwd)."""
    def absolute(value: str) -> str:
        return os.path.abspath(os.path.expanduser(value)) if value and not is_uri(value) else value

    paths = config.paths
    return dataclasses.replace(
        config, data=dataclasses.replace(config.data, path=absolute(config.data.path)),
        paths=dataclasses.replace(paths, pipeline_root=absolute(paths.pipeline_root),
                                  serving_dir=absolute(paths.serving_dir),
                                  metadata=absolute(paths.metadata)))


def has_hooks(config: Config) -> bool:
    """Whether the config names any of the user's own code (trainer_module/hooks.py)."""
    return bool(config.trainer.model or config.trainer.loss or config.transform.preprocessing_fn)


def validate(config: Config) -> None:
    try:
        config.trainer.validate()
        hook_paths.check_path(hook_paths.PREPROCESSING_KEY, config.transform.preprocessing_fn)
    except (TrainerConfigError, hook_paths.HookError) as err:
        raise ConfigError(str(err)) from None
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,127}", config.pipeline_name):
        raise ConfigError(f"pipeline_name must be lower-case letters, digits and '-' (Kubeflow's "
                          f"rule), got {config.pipeline_name!r}")
    if config.data.train_buckets < 1 or config.data.eval_buckets < 1:
        raise ConfigError("data.train_buckets and data.eval_buckets must be at least 1")
    try:
        row_split.check_keys(config.data.split_by, config.data.label)
    except row_split.SplitKeyError as err:
        raise ConfigError(str(err)) from None
    if config.data.min_count < 1 or config.data.max_vocabulary < 1:
        raise ConfigError("data.min_count and data.max_vocabulary must be at least 1, got "
                          f"{config.data.min_count} and {config.data.max_vocabulary}")
    if config.data.max_skew < 0:
        raise ConfigError("data.max_skew must be 0 (no check) or more")
    if ".." in config.data.span_pattern.split("/") or config.data.span_pattern.startswith("/"):
        raise ConfigError(f"data.span_pattern must stay under data.path (no '..', not absolute), "
                          f"got {config.data.span_pattern!r}")
    if config.data.span_pattern and config.data.span_pattern.count("{SPAN}") != 1:
        raise ConfigError(f"data.span_pattern must contain {{SPAN}} once, got "
                          f"{config.data.span_pattern!r}")
    if config.push.keep_versions < 0:
        raise ConfigError("push.keep_versions must be 0 or more")
    if config.data.max_drift < 0:
        raise ConfigError("data.max_drift must be 0 (no check) or more")
    if config.eval.margin < 0 or config.eval.max_gap < 0:
        raise ConfigError("eval.margin and eval.max_gap must be 0 or more")
    if config.run.lock_wait_seconds < 0 or config.run.timeout_minutes < 0:
        raise ConfigError("run.lock_wait_seconds and run.timeout_minutes must be 0 or more")
    if "/" in config.data.span_marker:
        raise ConfigError(f"data.span_marker must be a file name, got {config.data.span_marker!r}")
    if config.data.span_window < 1:
        raise ConfigError("data.span_window must be at least 1")
    if config.data.task not in ("auto", *TASKS):
        raise ConfigError(
            f"data.task must be auto, classification or regression, got {config.data.task!r}")
    if config.kubeflow.trainer_retries < 0 or config.kubeflow.trainer_retry_backoff_seconds < 0:
        raise ConfigError("kubeflow.trainer_retries and kubeflow.trainer_retry_backoff_seconds "
                          "must be 0 or more")
    digest = config.kubeflow.image_digest
    if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ConfigError(f"kubeflow.image_digest must be sha256: and 64 hex digits, got {digest!r}")
    if config.kubeflow.gpus < 0:
        raise ConfigError("kubeflow.gpus must be 0 or more")
    if config.kubeflow.gpus and config.trainer.tpu_slice:
        raise ConfigError("set trainer.tpu_slice or kubeflow.gpus, not both")
    if config.kubeflow.gpus and config.trainer.gpu_machines:
        raise ConfigError("set trainer.gpu_machines (GPU machines of a Vertex AI job) or "
                          "kubeflow.gpus (GPUs of the Trainer's own pod), not both")
