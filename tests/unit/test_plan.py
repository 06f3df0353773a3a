"""TPU slice presets and `lockstep plan`: the scaling rules as figures, through the CLI's own main
in this process (the process itself: tests/test_cli_exit.py)."""

import json

import pytest

from conftest import cli
from pipeline import config as config_lib
from trainer_module import slices


def test_presets_match_cloud_tpu_shapes():
    v5e4, v5e16, v4_32 = slices.get("v5e-4"), slices.get("v5e-16"), slices.get("v4-32")
    assert (v5e4.chips, v5e4.hosts, v5e4.topology, v5e4.replicas) == (4, 1, "2x2", 4)
    assert (v5e16.chips, v5e16.hosts, v5e16.topology, v5e16.replicas) == (16, 4, "4x4", 16)
    # v4 names count TensorCores; a chip is one megacore device, so one replica per chip.
    assert (v4_32.chips, v4_32.hosts, v4_32.topology, v4_32.replicas) == (16, 4, "2x2x4", 16)
    assert v5e4.node_selector() == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2"}
    assert slices.get("v5litepod-8") == slices.get("v5e-8")
    with pytest.raises(slices.SliceError, match="unknown TPU slice 'v5e-3'.*v5e-4"):
        slices.get("v5e-3")


def test_config_rejects_unknown_slice_and_slice_with_gpus():
    with pytest.raises(config_lib.ConfigError, match="trainer.tpu_slice: unknown TPU slice"):
        config_lib.load(None, {"trainer.tpu_slice": "v7-2"})
    with pytest.raises(config_lib.ConfigError, match="tpu_slice or kubeflow.gpus"):
        config_lib.load(None, {"trainer.tpu_slice": "v5e-4", "kubeflow.gpus": 1})


def _plan(*args):
    result = cli("plan", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_plan_grows_from_v5e4_to_v5e16():
    small, big = _plan("--slice", "v5e-4", "--slice", "v5e-16", "--per-replica-batch", "128",
                       "--train-examples", "1048576")
    assert (small["replicas"], big["replicas"]) == (4, 16)
    assert (small["per_replica_batch"], big["per_replica_batch"]) == (128, 128)
    assert (small["global_batch"], big["global_batch"]) == (512, 2048)
    assert big["train_steps"] * 4 == small["train_steps"] == 2048
    assert small["examples"] == big["examples"] == 1048576
    assert big["learning_rate"] == pytest.approx(2 * small["learning_rate"])  # sqrt of 4x
    assert (small["hosts"], big["hosts"]) == (1, 4)
    text = cli("plan", "--slice", "v5e-16", "--per-replica-batch", "128").stdout
    assert ("hosts                 4  (4 replicas each; each host's input pipeline reads its own "
            "share of the files and feeds 512 examples a step)") in text


def test_plan_reads_slice_and_batch_from_config(tmp_path):
    cfg = tmp_path / "tpu.toml"
    cfg.write_text('[trainer]\ntpu_slice = "v4-32"\nper_replica_batch = 64\n'
                   'train_examples = 64000\nbase_learning_rate = 0.1\nbase_batch = 256\n')
    (plan,) = _plan("--config", cfg)
    assert (plan["size"], plan["replicas"], plan["global_batch"]) == ("v4-32", 16, 1024)
    assert plan["train_steps"] == 62 and plan["learning_rate"] == pytest.approx(0.2)  # sqrt(4)
    text = cli("plan", "--config", cfg).stdout
    assert "TPU slice v4-32: 16 chip(s) on 4 host(s), topology 2x2x4" in text
    assert "global batch          1024  (= 64 x 16)" in text


def test_plan_replicas_and_errors():
    (plan,) = _plan("--replicas", "3", "--global-batch", "96")
    assert (plan["per_replica_batch"], plan["global_batch"]) == (32, 96)
    bad = cli("plan", "--slice", "v5e-3")
    assert bad.returncode == 2 and bad.stderr.startswith("lockstep: error: --slice: unknown TPU slice")
    uneven = cli("plan", "--replicas", "8", "--global-batch", "100")
    assert uneven.returncode == 2
    assert "global_batch=100 does not divide evenly over 8 replicas" in uneven.stderr
    assert len(uneven.stderr.strip().splitlines()) == 1


def test_a_small_slice_rehearses_a_larger_ones_math_by_accumulating():
    small, big = _plan("--slice", "v5e-4", "--like", "v5e-16", "--per-replica-batch", "128",
                       "--train-examples", "1048576")
    assert (small["size"], small["replicas"], small["accumulation_steps"]) == ("v5e-4", 4, 4)
    assert (big["size"], big["replicas"], big["accumulation_steps"]) == ("v5e-16", 16, 1)
    for key in ("global_batch", "train_steps", "learning_rate", "examples", "warmup_steps"):
        assert small[key] == big[key], key
    assert small["global_batch"] == 2048
    text = cli("plan", "--slice", "v5e-4", "--like", "v5e-16").stdout
    assert "global batch          512  (= 32 x 4 x 4 accumulated micro-batches)" in text
    assert "v5e-16: global batch x1, train steps x1, learning rate x1, examples x1" in text
    uneven = cli("plan", "--slice", "v5e-8", "--like", "v4-8")
    assert uneven.returncode == 2 and len(uneven.stderr.strip().splitlines()) == 1
    assert "--like v4-8: 8 replicas cannot reproduce the global batch of 4" in uneven.stderr


def _users(path, users=3000, times=3):
    lines = ["user,city,x,y"] + [f"u{u % users},c{u % 7},{u % 13},{'ab'[u % 2]}"
                                 for u in range(users * times)]
    path.write_text("\n".join(lines) + "\n")


def test_plan_prints_each_embedding_table_and_a_replicas_share(tmp_path):
    """--tables: the built-in model's tables from the data (a text column's values and its OOV
    bucket; an integer column's code), their bytes with Adam's slots, and what a replica holds:
    split over one machine's replicas past trainer.shard_embeddings_over, whole on a slice."""
    _users(tmp_path / "d.csv")
    cfg = tmp_path / "c.toml"
    cfg.write_text("[trainer]\nshard_embeddings_over = 0\nembedding_dim = 8\n")
    text = cli("plan", "--config", cfg, "--data", tmp_path / "d.csv", "--label", "y",
               "--replicas", "8", "--tables").stdout
    assert "  user_xf: 3,001 rows, 0.3 MB" in text  # 3,001 x 8 x 4 bytes x 3
    assert "  city_xf: 8 rows, 0.0 MB" in text and "  x_code: 14 rows, 0.0 MB" in text
    assert "  8 replicas: 0.0 MB a replica (user_xf, city_xf, x_code split over the replicas)" \
        in text
    text = cli("plan", "--data", tmp_path / "d.csv", "--label", "y", "--slice", "v5e-4",
               "--tables").stdout
    assert "  v5e-4: 0.3 MB a replica of 16 GiB" in text
    # Asynchronous: the tables past the bound split over the parameter servers instead.
    cfg.write_text('[trainer]\nstrategy = "parameter_server"\nps_servers = 3\n'
                   "shard_embeddings_over = 100000\nembedding_dim = 8\n")
    text = cli("plan", "--config", cfg, "--data", tmp_path / "d.csv", "--label", "y",
               "--tables").stdout
    assert "split over the parameter servers past trainer.shard_embeddings_over" in text, text
    assert ("  3 parameter server(s): 0.1 MB a server of the split tables (user_xf), and the 2 "
            "whole ones (0.0 MB) placed one to a server in turn") in text, text


def test_plan_refuses_tables_a_replica_cannot_hold(tmp_path):
    """A v5e chip holds 16 GiB: 3,001 rows x 600,000 take 21.6 GB with Adam's slots; a slice
    does not split tables, so the line names max_vocabulary and GPU or CPU replicas."""
    _users(tmp_path / "d.csv")
    cfg = tmp_path / "c.toml"
    cfg.write_text("[trainer]\nembedding_dim = 600000\n")
    refused = cli("plan", "--config", cfg, "--data", tmp_path / "d.csv", "--label", "y",
                  "--slice", "v5e-4", "--tables")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert ("v5e-4: the embedding tables take 21,765.6 MB a replica, more than its 16 GiB; the "
            "largest, user_xf: 3,001 rows x 600000, 21,607.2 MB with Adam's slots, whole on every "
            "replica: data.max_vocabulary = 1,193 would fit it in half a replica, or train on GPU or CPU "
            "replicas, which split it") in refused.stderr, refused.stderr


def test_the_step_is_not_compiled_where_xla_on_cpu_would_abort_the_process():
    """XLA on CPU aborts the process compiling a 16-bit dot (TensorFlow 2.16; a run of a TPU's
    settings on a CPU ended with status 134): there the plan says the step is not compiled, and
    why; a TPU's and a GPU's are, and XLA on CPU in float32."""
    from trainer_module import scaling
    from trainer_module.settings import TrainerConfig

    tpu_settings = TrainerConfig(jit_compile=True, precision="mixed_bfloat16", train_steps=10)
    on_cpu = scaling.make_plan(tpu_settings, 2, hardware="cpu")
    on_tpu = scaling.make_plan(tpu_settings, 8, hardware="tpu")
    assert not scaling.compiled(tpu_settings, "cpu") and scaling.UNCOMPILED in on_cpu.warnings
    assert scaling.compiled(tpu_settings, "tpu") and scaling.UNCOMPILED not in on_tpu.warnings
    gpu_settings = TrainerConfig(jit_compile=True, precision="mixed_float16", train_steps=10)
    assert not scaling.compiled(gpu_settings, "cpu") and scaling.compiled(gpu_settings, "gpu")
    float32 = TrainerConfig(jit_compile=True, train_steps=10)
    assert scaling.compiled(float32, "cpu") and not scaling.make_plan(float32, 2).warnings
    assert not scaling.compiled(TrainerConfig(precision="mixed_bfloat16"), "tpu")
