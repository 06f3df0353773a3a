from pathlib import Path

import pytest

from pipeline import config as config_lib


def test_defaults_serve_the_bundled_data():
    config = config_lib.load()
    assert config.data.label == "species"
    assert (config_lib.BUNDLED_DATA / "penguins.csv").is_file()


def test_toml_then_flags_override(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[trainer]\nper_replica_batch = 16\ntrain_steps = 7\n[data]\nlabel = "kind"\n')
    config = config_lib.load(path, {"trainer.train_steps": 9, "data.path": None})
    assert config.trainer.per_replica_batch == 16
    assert config.trainer.train_steps == 9  # the flag wins
    assert config.data.label == "kind"


def test_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  emulate_replicas: 4\nbeam_args: ['--foo=1']\n")
    config = config_lib.load(path)
    assert config.trainer.emulate_replicas == 4 and config.beam_args == ["--foo=1"]


@pytest.mark.parametrize("text, message", [
    ("[trainer]\nper_replica_bach = 3\n", "unknown config key 'trainer.per_replica_bach'"),
    ("[trainer]\nper_replica_batch = 'x'\n", "'trainer.per_replica_batch' must be int"),
    ("[trainer]\nstrategy = 'gpu'\n", "trainer.strategy must be"),
    ("[trainer\n", "c.toml"),
    ("[data]\nmin_count = 0\n", "data.min_count and data.max_vocabulary must be at least 1"),
    ("[trainer]\nshard_embeddings_over = -2\n", "trainer.shard_embeddings_over is a number of "
                                                 "bytes"),
])
def test_bad_config_names_the_key(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(config_lib.ConfigError, match=message.replace("[", r"\[")):
        config_lib.load(path)


def test_a_pipeline_name_kubeflow_refuses_is_refused_when_the_config_loads(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('pipeline_name = "wide_deep"\n')
    with pytest.raises(config_lib.ConfigError, match="pipeline_name must be lower-case letters, digits and "
                                          "'-' .Kubeflow's rule., got 'wide_deep'"):
        config_lib.load(path)


def test_relative_paths_in_a_file_are_relative_to_its_directory(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    path = project / "lockstep.yaml"
    path.write_text("data:\n  path: data/train.csv\npaths:\n  pipeline_root: ../out/root\n"
                    "  serving_dir: ~/serving\n  metadata: gs://b/m.sqlite\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = config_lib.absolutize(config_lib.load(path))
    assert config.data.path == str(project / "data" / "train.csv")
    assert config.paths.pipeline_root == str(tmp_path / "out" / "root")
    assert config.paths.serving_dir == str(Path("~/serving").expanduser())
    assert config.paths.metadata == "gs://b/m.sqlite"
    # A flag's path is the current directory's; a key the file does not give keeps its default.
    flagged = config_lib.absolutize(config_lib.load(path, {"data.path": "mine.csv"}))
    assert flagged.data.path == str(elsewhere / "mine.csv")
    toml = project / "c.toml"
    toml.write_text('[data]\nlabel = "kind"\n')
    default = config_lib.absolutize(config_lib.load(toml))
    assert default.paths.pipeline_root == str(elsewhere / "runs" / "pipeline_root")
    assert default.data.path == str(config_lib.BUNDLED_DATA)


def test_the_example_config_reads_its_data_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = config_lib.absolutize(config_lib.load(config_lib.REPO_ROOT / "examples" / "wide_deep"
                                                   / "config.toml"))
    assert Path(config.data.path).is_file()
    assert config.paths.pipeline_root == str(config_lib.REPO_ROOT / "runs" / "wide_deep"
                                             / "pipeline_root")
