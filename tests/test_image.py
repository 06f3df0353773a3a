"""The pipeline image, built here (`make image`: podman on bases made from Debian's packages when
there is no docker), and the compiled pipeline run task by task in it, each task in its own
container under kfp.local, to a pushed model that serves raw tf.Examples."""

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import REPO, lockstep, serving_accuracy

pytestmark = pytest.mark.slow

ENGINE = {}  # the engine `make image` used: docker with a running engine, else podman


def _engine(*args, check=True):
    return subprocess.run([ENGINE["name"], *args], capture_output=True, text=True, check=check)


def _no_engine() -> str:
    """Why `make image` cannot run here ("" when it can): no docker engine and no podman set."""
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return ""
    lacking = [tool for tool in ("podman", "runc", "debootstrap") if not shutil.which(tool)]
    return (f"no docker engine and {', '.join(lacking)} missing (apt-get install "
            f"{' '.join(lacking)}; `make test` installs them as root)") if lacking else ""


@pytest.fixture(scope="session")
def image():
    if reason := _no_engine():
        pytest.skip(reason)
    # With the example's own code (examples/wide_deep) on the image's PYTHONPATH.
    result = subprocess.run(["make", "image", "USER_CODE=examples/wide_deep"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = re.search(r"^make image: (\S+) with (\w+) in (\d+)s, ([\d.]+) GB$", result.stdout,
                        re.M)
    assert summary, result.stdout
    name, ENGINE["name"] = summary.group(1), summary.group(2)
    size = float(summary.group(4))
    assert size <= 3.5, f"image is {size} GB"
    print(summary.group(0))  # size and build time, for the record
    return {"name": name if ENGINE["name"] == "docker" else f"localhost/{name}"}


def test_image_runs_the_spec_command_as_uid_1000_with_legacy_keras(image):
    from components.entrypoint import COMMAND

    config = json.loads(_engine("image", "inspect", image["name"]).stdout)[0]["Config"]
    assert config["Entrypoint"] == list(COMMAND)
    assert "TF_USE_LEGACY_KERAS=1" in config["Env"]
    probe = ("import os, sys; from components import entrypoint\n"
             "for path in sys.argv[1:]:\n"
             "    from tfx.utils import import_utils; import_utils.import_class_by_path(path)\n"
             "print(os.getuid(), os.environ['TF_USE_LEGACY_KERAS'])")
    executors = ["components.csv_example_gen.Executor", "components.trainer.Executor",
                 "components.evaluator.Executor", "components.latest_model.Executor",
                 "components.transform.Executor",
                 "tfx.components.pusher.executor.Executor"]
    result = _engine("run", "--rm", "--entrypoint", "python", image["name"], "-c", probe,
                     *executors, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["1000", "1"]
    # The compiler the environment's install needed left with it (the same layer purged it).
    result = _engine("run", "--rm", "--entrypoint", "sh", image["name"], "-c",
                     "command -v g++ gcc cc || echo none", check=False)
    assert result.stdout.split() == ["none"], result.stdout
    # The user's hooks import by the dotted paths a compiled spec names, as any task imports them.
    probe = ("from trainer_module import hook_paths, hooks\n"
             "for key, path, n in ((hook_paths.MODEL_KEY, 'wide_deep.model:build', 1),\n"
             "                     (hook_paths.PREPROCESSING_KEY, 'wide_deep.preprocessing:preprocessing_fn', 1)):\n"
             "    print(hooks.load(key, path, n).__module__)")
    result = _engine("run", "--rm", "--entrypoint", "python", image["name"], "-c", probe,
                     check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["wide_deep.model", "wide_deep.preprocessing"]


def test_a_code_only_rebuild_reuses_the_dependency_layer(image, tmp_path):
    """Our code changes, pyproject.toml and uv.lock do not: the dependency layer is reused."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    copy = tmp_path / "repo"
    for name in tracked:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    with open(copy / "trainer_module" / "features.py", "a") as handle:
        change = f"\n# a code-only change, {time.time_ns()}\n"  # new each time: no cached layer
        handle.write(change)
    result = subprocess.run(["bash", "infra/build-image.sh"], cwd=copy, capture_output=True,
                            text=True, env=dict(os.environ, IMAGE="lockstep-pipeline:rebuild-test"))
    assert result.returncode == 0, result.stderr[-3000:]
    steps = re.split(r"^\[\d/\d\] STEP ", result.stderr, flags=re.M)
    firsts = [s.split("\n", 1)[0] for s in steps]
    [deps] = [s for s, first in zip(steps, firsts) if "--no-install-project" in first]
    [code] = [s for s, first in zip(steps, firsts) if "lockstep_pipeline-*.whl" in first]
    assert "Using cache" in deps, deps[-2000:]  # no package downloaded or installed again
    assert "Using cache" not in code  # the project's wheel was installed anew
    # Nor the environment copied, or compared with a cached copy (26 s a build, with podman):
    # the final stage starts from the stage that installed it.
    assert not [f for f in firsts if "COPY --from" in f and "/opt/venv" in f], firsts
    print(result.stdout.strip())  # the rebuild's time, for the record
    # And the image has the new code, not a cached layer's.
    probe = _engine("run", "--rm", "--entrypoint", "tail", "localhost/lockstep-pipeline:rebuild-test"
                    if ENGINE["name"] == "podman" else "lockstep-pipeline:rebuild-test", "-n", "1",
                    "/opt/venv/lib/python3.11/site-packages/trainer_module/features.py")
    assert probe.stdout.strip() == change.strip()
    _engine("rmi", "-f", "lockstep-pipeline:rebuild-test", check=False)


@pytest.fixture(scope="session")
def podman_socket(image, tmp_path_factory):
    """Docker's API on a local socket (podman's), for kfp.local's Docker runner."""
    if ENGINE["name"] == "docker":
        yield None
        return
    socket = tmp_path_factory.mktemp("podman") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not socket.exists():
        assert time.monotonic() < deadline, "podman's API socket did not appear"
        time.sleep(0.2)
    try:
        yield f"unix://{socket}"
    finally:
        service.terminate()
        service.wait(timeout=30)


def test_compiled_pipeline_runs_task_by_task_in_the_image(image, podman_socket, tmp_path):
    from pipeline.local import kfp_local

    root = tmp_path / "root"  # what the containers see: data, artifacts and the serving dir
    (root / "data").mkdir(parents=True)
    shutil.copy(REPO / "data" / "penguins" / "penguins.csv", root / "data")
    os.chmod(root, 0o777)
    spec = tmp_path / "pipeline.yaml"
    result = lockstep("compile", "--data", root / "data", "--pipeline-root", root,
                      "--serving-dir", root / "serving", "--image", image["name"],
                      "--output", spec)
    assert result.returncode == 0, result.stderr
    if podman_socket:
        os.environ["DOCKER_HOST"] = podman_socket
    try:
        run = kfp_local.run(str(spec), str(root), containers=True)
    finally:
        os.environ.pop("DOCKER_HOST", None)
    assert [t.task for t in run.tasks if t.succeeded] == [t.task for t in run.tasks]
    assert len(run.tasks) == 10
    report = run.report()
    assert report.blessed and report.pushed_to
    [version] = [p for p in (root / "serving").iterdir() if p.name.isdigit()]
    assert str(version) == report.pushed_to
    files = list(root.glob("lockstep-*/CsvExampleGen/examples/Split-eval/*"))
    assert serving_accuracy(version, files) > 0.9
