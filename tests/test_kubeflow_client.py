"""`lockstep submit / schedule / schedules` through the real kfp.Client against a recording
stand-in of the KFP v2beta1 REST API on 127.0.0.1 (tests/kfp_standin.py): the CLI's main in this
process, but where the test is about processes (a token in no process's argv)."""

import os
import socket

import pytest
import yaml

from conftest import cli
from kfp_standin import StandIn


@pytest.fixture
def kfp():
    with StandIn() as server:
        yield server


def _spec(compiled):
    return list(yaml.safe_load_all(compiled["output"].read_text()))


def test_submit_sends_our_spec_params_and_token(kfp, compiled):
    result = cli("submit", "--host", kfp.host, "--package", compiled["output"],
                      "--experiment", "nightly", "--run-name", "first", "--param",
                      "train_steps=500", "--param", "base_learning_rate=0.05",
                      env={**os.environ, "KF_PIPELINES_TOKEN": "tok"})
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
    result = cli("schedule", "--host", kfp.host, "--package", compiled["output"],
                      "--cron", "0 0 3 * * *", "--param", "data_root=gs://b/new")
    assert result.returncode == 0, result.stderr
    assert "rr-1" in result.stdout and "UTC" in result.stdout
    (job,) = kfp.bodies("POST", "/recurringruns")
    assert job["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert int(job["max_concurrency"]) == 1 and job["no_catchup"] is True
    assert job["mode"] == "ENABLE" and job["display_name"] == "lockstep-retrain"
    assert job["pipeline_spec"]["pipeline_spec"]["root"] == _spec(compiled)[0]["root"]
    assert job["runtime_config"]["parameters"] == {"data_root": "gs://b/new"}

    listed = cli("schedules", "list", "--host", kfp.host)
    assert listed.returncode == 0 and "rr-1" in listed.stdout and "0 0 3 * * *" in listed.stdout
    assert cli("schedules", "pause", "rr-1", "--host", kfp.host).returncode == 0
    assert kfp.recurring["rr-1"]["status"] == "DISABLED"
    assert cli("schedules", "resume", "rr-1", "--host", kfp.host).returncode == 0
    assert kfp.recurring["rr-1"]["status"] == "ENABLED"
    assert cli("schedules", "delete", "rr-1", "--host", kfp.host).returncode == 0
    assert not kfp.recurring


def test_schedule_apply_creates_leaves_or_replaces(kfp, compiled):
    """Schedules kept as code: apply makes the cluster's recurring run of that name match."""
    apply = lambda *extra: cli(  # noqa: E731
        "schedule", "--apply", "--name", "nightly", "--host", kfp.host,
        "--package", compiled["output"], *extra)
    first = apply("--cron", "0 0 3 * * *")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "lockstep: recurring run 'nightly' created: rr-1"
    same = apply("--cron", "0 0 3 * * *")
    assert same.stdout.strip() == "lockstep: recurring run 'nightly' unchanged: rr-1"
    assert len(kfp.bodies("POST", "/recurringruns")) == 1
    changed = apply("--cron", "0 30 4 * * *", "--param", "epochs=3")
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.strip() == ("lockstep: recurring run 'nightly' replaced: rr-2 "
                                      "(replaced rr-1)")
    # The old one was paused before the new one was created, and deleted after.
    calls = [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in kfp.requests
             if "/recurringruns" in r["path"] and r["method"] != "GET"]
    assert calls[-3:] == [("POST", "rr-1:disable"), ("POST", "recurringruns"), ("DELETE", "rr-1")]
    [job] = kfp.recurring.values()
    assert job["trigger"]["cron_schedule"]["cron"] == "0 30 4 * * *"
    assert job["runtime_config"]["parameters"] == {"epochs": 3.0}
    assert apply("--cron", "0 30 4 * * *", "--param", "epochs=3").stdout.strip().endswith(
        "unchanged: rr-2")


def test_token_from_kfp_service_account_token_file(kfp, compiled, tmp_path):
    token = tmp_path / "token"
    token.write_text("from-file\n")
    env = {k: v for k, v in os.environ.items() if k not in ("KF_PIPELINES_TOKEN", "KFP_TOKEN")}
    result = cli("schedules", "list", "--host", kfp.host,
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
    line = _one_line_error(cli("submit", "--host", kfp.host, *package))
    assert f"KFP at {kfp.host} refused to find or create experiment 'lockstep': 401" in line
    assert "KF_PIPELINES_TOKEN" in line
    kfp.failures.clear()

    kfp.fail("POST", "/runs", 400, "Failed to create a run: invalid pipeline spec")
    line = _one_line_error(cli("submit", "--host", kfp.host, *package))
    assert "rejected the request to create the run: 400" in line
    assert "invalid pipeline spec" in line
    kfp.failures.clear()

    line = _one_line_error(cli("schedules", "delete", "rr-9", "--host", kfp.host))
    assert "could not delete recurring run rr-9: 404 Not Found" in line

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    line = _one_line_error(cli("submit", "--host", closed, *package))
    assert f"cannot reach KFP at {closed}" in line


def test_bad_flags(kfp, compiled):
    package = ["--package", compiled["output"]]
    line = _one_line_error(cli("submit", "--host", kfp.host, *package, "--param",
                                    "dropout=0.3"), status=2)
    assert "--param dropout: not a pipeline parameter (known: accumulation_steps, base_learning_rate, data_root" in line
    line = _one_line_error(cli("submit", "--host", kfp.host, *package, "--param",
                                    "train_steps=many"), status=2)
    assert "--param train_steps=many: must be" in line
    line = _one_line_error(cli("schedule", "--host", kfp.host, *package, "--cron",
                                    "0 3 * * *"))
    assert "has 5 fields; KFP's cron has 6, seconds first (try '0 0 3 * * *')" in line
    assert not kfp.bodies("POST", "/recurringruns") and not kfp.bodies("POST", "/runs")


def test_vertex_without_credentials_or_with_a_local_root_is_one_line(compiled, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST",
                        "KUBERNETES_SERVICE_HOST", "CLOUDSDK_CONFIG")}
    env["HOME"] = str(tmp_path)  # no gcloud ADC file there

    def vertex(*extra, **more_env):
        return cli("submit", "--vertex", "--package", compiled["output"], *extra,
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
    result = cli("submit", "--host", kfp.host, "--config", compiled["config"],
                      "--image", "r/lockstep:dev", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (run,) = kfp.bodies("POST", "/runs")
    executors = run["pipeline_spec"]["pipeline_spec"]["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {"r/lockstep:dev"}
    assert run["pipeline_spec"]["platform_spec"]["platforms"]["kubernetes"]
    assert not list(tmp_path.iterdir())  # the temporary spec is gone


SENTINEL = "sentinel-token-3f9c1e"


def _no_token_env(**more):
    env = {k: v for k, v in os.environ.items()
           if k not in ("KF_PIPELINES_TOKEN", "KFP_TOKEN", "KF_PIPELINES_SA_TOKEN_PATH",
                        "KF_PIPELINES_ENDPOINT")}
    return {**env, **more}


@pytest.mark.slow
def test_a_token_is_never_a_flag_value_and_never_leaks(kfp, compiled, tmp_path):
    """The token from a file or stdin reaches the server, and nothing else: not argv (of this
    process or the compile it starts), not stdout or stderr, not a file."""
    import subprocess
    import threading

    from conftest import LOCKSTEP, REPO

    refused = cli("submit", "--host", kfp.host, "--package", compiled["output"],
                       "--token", SENTINEL, env=_no_token_env())
    line = _one_line_error(refused, status=2)
    assert "--token would put the token in the command line" in line and SENTINEL not in line
    assert not kfp.requests

    token_file = tmp_path / "token"
    token_file.write_text(SENTINEL + "\n")
    token_file.chmod(0o600)
    work = tmp_path / "work"
    work.mkdir()
    seen_argv, done = [], threading.Event()

    def watch_argv():  # every process's command line, while the submit runs
        # A sweep every 5 ms or so: any process living longer is seen (a Python one lives 20 ms
        # at the least); without the pause this thread took a core from the processes it watches.
        while not done.wait(0.005):
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        seen_argv.append(open(f"/proc/{pid}/cmdline", "rb").read())
                    except OSError:
                        pass

    watcher = threading.Thread(target=watch_argv)
    watcher.start()
    try:
        env = {**_no_token_env(), "PYTHONPATH": str(REPO)}
        by_file = subprocess.run(
            LOCKSTEP + ["submit", "--host", kfp.host, "--config", str(compiled["config"]),
                        "--image", "r/lockstep:dev", "--token-file", str(token_file)],
            cwd=work, env=env, capture_output=True, text=True, timeout=600)
        by_stdin = subprocess.run(
            LOCKSTEP + ["schedules", "list", "--host", kfp.host, "--token-file", "-"],
            cwd=work, env=env, input=SENTINEL + "\n", capture_output=True, text=True, timeout=600)
    finally:
        done.set()
        watcher.join()
    assert by_file.returncode == 0 and by_stdin.returncode == 0, (by_file.stderr, by_stdin.stderr)
    assert {r["auth"] for r in kfp.requests} == {f"Bearer {SENTINEL}"}
    assert len(kfp.bodies("POST", "/runs")) == 1  # compiled in a subprocess, then submitted
    assert seen_argv and not [a for a in seen_argv if SENTINEL.encode() in a]
    for result in (by_file, by_stdin):
        assert SENTINEL not in result.stdout + result.stderr
    for directory in (work, compiled["root"]):
        for path in directory.rglob("*"):
            if path.is_file():
                assert SENTINEL.encode() not in path.read_bytes(), path


def test_a_token_goes_only_to_a_host_the_user_named(kfp, compiled, tmp_path):
    package = ["--package", compiled["output"]]
    config = tmp_path / "shared.toml"
    config.write_text(f'[kubeflow]\nhost = "{kfp.host}"\n')
    token = {"KF_PIPELINES_TOKEN": SENTINEL}
    # A host from a (shared) config file gets no token ...
    line = _one_line_error(cli("schedules", "list", "--config", config,
                                    env=_no_token_env(**token)), status=2)
    assert f"kubeflow.host {kfp.host} comes from the config file" in line
    # ... and the environment's endpoint beats it.
    ok = cli("schedules", "list", "--config", config,
                  env=_no_token_env(KF_PIPELINES_ENDPOINT=kfp.host, **token))
    assert ok.returncode == 0, ok.stderr
    # Without a token, the config's host is fine.
    assert cli("schedules", "list", "--config", config, env=_no_token_env()).returncode == 0
    # Plain http only to this machine.
    line = _one_line_error(cli("submit", "--host", "http://10.1.2.3:8888", *package,
                                    env=_no_token_env(**token)), status=2)
    assert "plain http would send the token in the clear" in line
    assert {r["auth"] for r in kfp.requests} == {f"Bearer {SENTINEL}", None}
    # A redirect to another host does not carry the token along.
    with StandIn() as other:
        kfp.redirect_to = other.host
        cli("schedules", "list", "--host", kfp.host, env=_no_token_env(**token))
        assert other.requests, "the redirect was not followed"
        assert {r["auth"] for r in other.requests} == {None}


def test_submit_and_schedule_are_use_cases_called_in_process(kfp, compiled, monkeypatch):
    """No CLI: the use cases (pipeline/use_cases/on_kubeflow.py) take a config and the access,
    and return what was made; errors are the project's (status 2 for a bad parameter)."""
    from pipeline import config as config_lib, errors
    from pipeline.use_cases import on_kubeflow

    monkeypatch.setenv("KF_PIPELINES_TOKEN", "tok")
    config = config_lib.load(compiled["config"])
    access = on_kubeflow.KfpAccess(host=kfp.host, experiment="nightly")
    package = str(compiled["output"])
    done = on_kubeflow.submit(config, access, package=package, run_name="first",
                              params=["train_steps=500"])
    assert done == on_kubeflow.Submitted("run-1", "first", "nightly",
                                         f"{kfp.host}/#/runs/details/run-1")
    (run,) = kfp.bodies("POST", "/runs")
    assert run["runtime_config"]["parameters"] == {"train_steps": 500}
    made = on_kubeflow.schedule(config, access, "0 0 3 * * *", package=package)
    assert made == on_kubeflow.Scheduled("lockstep-retrain", "rr-1")
    assert [s.id for s in on_kubeflow.schedules(config, access)] == ["rr-1"]
    on_kubeflow.schedules(config, access, "delete", "rr-1")
    assert not kfp.recurring and {r["auth"] for r in kfp.requests} == {"Bearer tok"}
    with pytest.raises(config_lib.ConfigError, match="train_stepz") as refused:
        on_kubeflow.submit(config, access, package=package, params=["train_stepz=5"])
    assert errors.status_of(refused.value) == errors.INPUT
