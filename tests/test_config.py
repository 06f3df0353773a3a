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
