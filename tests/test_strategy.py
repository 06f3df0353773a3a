import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO
from pipeline.config import TrainerConfig
from trainer_module import strategy as strategy_lib


def test_emulated_replicas_give_a_mirrored_strategy():
    strategy = strategy_lib.resolve_strategy(TrainerConfig(emulate_replicas=8))
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 8


def test_emulated_replicas_after_tensorflow_started_is_a_clear_error():
    tf.constant(1.0)  # TensorFlow is running with the 8 devices conftest made
    with pytest.raises(strategy_lib.StrategyError, match="emulate_replicas=4, but TensorFlow already"):
        strategy_lib.configure_emulated_replicas(4)


def test_cpu_default_strategy():
    strategy = strategy_lib.resolve_strategy(TrainerConfig(strategy="cpu"))
    assert strategy.num_replicas_in_sync == 1


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(strategy_lib.StrategyError, match="needs TF_CONFIG"):
        strategy_lib.resolve_strategy(TrainerConfig(strategy="multi_worker"))
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(strategy_lib.StrategyError, match="TF_CONFIG is not valid JSON"):
        strategy_lib.resolve_strategy(TrainerConfig(strategy="multi_worker"))


def test_mirrored_without_gpu_is_a_clear_error():
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(strategy_lib.StrategyError, match="no GPU is visible"):
        strategy_lib.resolve_strategy(TrainerConfig(strategy="mirrored"))


SCRIPT = """
import os, json
os.environ["TF_USE_LEGACY_KERAS"] = "1"
from pipeline.config import TrainerConfig
from trainer_module import strategy as s
out = {}
try:
    s.resolve_strategy(TrainerConfig(strategy="tpu", tpu="local"))
except s.StrategyError as e:
    out["error"] = str(e)
out["fallback"] = s.resolve_strategy(
    TrainerConfig(strategy="tpu", tpu="local", allow_fallback=True)).num_replicas_in_sync
print(json.dumps(out))
"""


def test_tpu_that_is_not_there_is_an_error_unless_fallback_is_allowed():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["error"].startswith("TPU 'local' is not reachable")
    assert "allow_fallback" in out["error"]
    assert out["fallback"] == 1


def test_a_named_slice_under_auto_is_a_tpu_this_host_or_vertex_s(monkeypatch):
    """The pipeline passes the user's settings whole; `auto` with trainer.tpu_slice asks for the
    slice's TPU (this host's chips, "local", unless Vertex AI's TPU_CONFIG names the hosts), and
    is refused without allow_fallback when there is none, as `strategy = "tpu"` is."""
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("TPU_CONFIG", raising=False)
    with pytest.raises(strategy_lib.StrategyError, match=r"TPU 'local' is not reachable"):
        strategy_lib.resolve_strategy(TrainerConfig(tpu_slice="v5e-4"))
    fallback = strategy_lib.resolve_strategy(TrainerConfig(tpu_slice="v5e-4", allow_fallback=True))
    assert not isinstance(fallback, tf.distribute.TPUStrategy)
