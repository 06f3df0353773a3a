"""`lockstep submit / schedule / schedules` through the real kfp.Client against a recording
stand-in of the KFP v2beta1 REST API on 127.0.0.1 (tests/kfp_standin.py)."""

import os
import socket

import pytest
import yaml

from conftest import lockstep
from kfp_standin import StandIn


@pytest.fixture
def kfp():
    with StandIn() as server:
        yield server


def _spec(compiled):
    return list(yaml.safe_load_all(compiled["output"].read_text()))


def test_submit_sends_our_spec_params_and_token(kfp, compiled):
    result = lockstep("submit", "--host", kfp.host, "--package", compiled["output"],
                      "--experiment", "nightly", "--run-name", "first", "--param",
                      "train_steps=500", "--param", "base_learning_rate=0.05", "--token", "tok")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "lockstep: run run-1 (first) in experiment 'nightly'",
        f"{kfp.host}/#/runs/details/run-1"]
    (experiment,) = kfp.bodies("POST", "/experiments")
    assert experiment["display_name"] == "nightly"
    (run,) = kfp.bodies("POST", "/runs")
    spec, platform = _spec(compiled)
    assert run["display_name"] == "first" and run["experiment_id"] == "exp-1"
    assert run["pipeline_spec"]["pipeline_spec"]["root"] == spec["root"]
    assert run["pipeline_spec"]["platform_spec"] == platform  # the TPU node selectors travel
    assert run["runtime_config"]["parameters"] == {"train_steps": 500, "base_learning_rate": 0.05}
    assert {r["auth"] for r in kfp.requests} == {"Bearer tok"}


def test_schedule_sends_cron_concurrency_and_no_catchup(kfp, compiled):
    result = lockstep("schedule", "--host", kfp.host, "--package", compiled["output"],
                      "--cron", "0 0 3 * * *", "--param", "data_root=gs://b/new")
    assert result.returncode == 0, result.stderr
    assert "rr-1" in result.stdout and "UTC" in result.stdout
    (job,) = kfp.bodies("POST", "/recurringruns")
    assert job["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert int(job["max_concurrency"]) == 1 and job["no_catchup"] is True
    assert job["mode"] == "ENABLE" and job["display_name"] == "lockstep-retrain"
    assert job["pipeline_spec"]["pipeline_spec"]["root"] == _spec(compiled)[0]["root"]
    assert job["runtime_config"]["parameters"] == {"data_root": "gs://b/new"}

    listed = lockstep("schedules", "list", "--host", kfp.host)
    assert listed.returncode == 0 and "rr-1" in listed.stdout and "0 0 3 * * *" in listed.stdout
    assert lockstep("schedules", "pause", "rr-1", "--host", kfp.host).returncode == 0
    assert kfp.recurring["rr-1"]["status"] == "DISABLED"
    assert lockstep("schedules", "resume", "rr-1", "--host", kfp.host).returncode == 0
    assert kfp.recurring["rr-1"]["status"] == "ENABLED"
    assert lockstep("schedules", "delete", "rr-1", "--host", kfp.host).returncode == 0
    assert not kfp.recurring


def test_token_from_kfp_service_account_token_file(kfp, compiled, tmp_path):
    token = tmp_path / "token"
    token.write_text("from-file\n")
    env = {k: v for k, v in os.environ.items() if k not in ("KF_PIPELINES_TOKEN", "KFP_TOKEN")}
    result = lockstep("schedules", "list", "--host", kfp.host,
                      env={**env, "KF_PIPELINES_SA_TOKEN_PATH": str(token)})
    assert result.returncode == 0, result.stderr
    assert {r["auth"] for r in kfp.requests} == {"Bearer from-file"}


def _one_line_error(result, status=1):
    assert result.returncode == status, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockstep: error: "), result.stderr
    return lines[0]


def test_server_errors_are_one_line(kfp, compiled):
    package = ["--package", compiled["output"]]
    kfp.fail("GET", "/experiments", 401, "Unauthenticated")
    line = _one_line_error(lockstep("submit", "--host", kfp.host, *package))
    assert f"KFP at {kfp.host} refused to find or create experiment 'lockstep': 401" in line
    assert "KF_PIPELINES_TOKEN" in line
    kfp.failures.clear()

    kfp.fail("POST", "/runs", 400, "Failed to create a run: invalid pipeline spec")
    line = _one_line_error(lockstep("submit", "--host", kfp.host, *package))
    assert "rejected the request to create the run: 400" in line
    assert "invalid pipeline spec" in line
    kfp.failures.clear()

    line = _one_line_error(lockstep("schedules", "delete", "rr-9", "--host", kfp.host))
    assert "could not delete recurring run rr-9: 404 Not Found" in line

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    line = _one_line_error(lockstep("submit", "--host", closed, *package))
    assert f"cannot reach KFP at {closed}" in line


def test_bad_flags(kfp, compiled):
    package = ["--package", compiled["output"]]
    line = _one_line_error(lockstep("submit", "--host", kfp.host, *package, "--param",
                                    "dropout=0.3"), status=2)
    assert "--param dropout: not a pipeline parameter (known: base_learning_rate, data_root" in line
    line = _one_line_error(lockstep("submit", "--host", kfp.host, *package, "--param",
                                    "train_steps=many"), status=2)
    assert "--param train_steps=many: must be" in line
    line = _one_line_error(lockstep("schedule", "--host", kfp.host, *package, "--cron",
                                    "0 3 * * *"))
    assert "has 5 fields; KFP's cron has 6, seconds first (try '0 0 3 * * *')" in line
    assert not kfp.bodies("POST", "/recurringruns") and not kfp.bodies("POST", "/runs")


def test_vertex_without_credentials_or_with_a_local_root_is_one_line(compiled, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST",
                        "KUBERNETES_SERVICE_HOST", "CLOUDSDK_CONFIG")}
    env["HOME"] = str(tmp_path)  # no gcloud ADC file there

    def vertex(*extra, **more_env):
        return lockstep("submit", "--vertex", "--package", compiled["output"], *extra,
                        env={**env, **more_env})

    line = _one_line_error(vertex("--project", "p", "--region", "us-central1"))
    assert "no Google Cloud credentials for Vertex AI" in line
    key = tmp_path / "key.json"
    key.write_text("{}")
    line = _one_line_error(vertex("--project", "p", "--region", "us-central1",
                                  GOOGLE_APPLICATION_CREDENTIALS=str(key)))
    assert "Vertex AI needs a gs:// pipeline root" in line
    usage = _one_line_error(vertex(), status=2)
    assert usage.endswith("--vertex needs --project and --region")


def test_submit_without_a_package_compiles_first(kfp, compiled, tmp_path):
    result = lockstep("submit", "--host", kfp.host, "--config", compiled["config"],
                      "--image", "r/lockstep:dev", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (run,) = kfp.bodies("POST", "/runs")
    executors = run["pipeline_spec"]["pipeline_spec"]["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {"r/lockstep:dev"}
    assert run["pipeline_spec"]["platform_spec"]["platforms"]["kubernetes"]
    assert not list(tmp_path.iterdir())  # the temporary spec is gone
