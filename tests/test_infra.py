"""infra/ agrees with the code: the image runs what the compiled spec calls, at the package's
version, and Terraform's default TPU pool is the v5e-4 preset. (The linters run in `make lint`.)"""

import json
import re
import tomllib

from conftest import REPO
from trainer_module import slices

DOCKERFILE = (REPO / "infra" / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_image_entrypoint_is_the_command_the_compiled_spec_runs(compiled):
    import yaml

    from components.entrypoint import COMMAND

    entrypoint = re.search(r"^ENTRYPOINT (.+)$", DOCKERFILE, re.M).group(1)
    assert json.loads(entrypoint) == list(COMMAND)
    spec = next(yaml.safe_load_all(compiled["output"].read_text()))
    commands = {e["container"]["command"] == list(COMMAND)
                for e in spec["deploymentSpec"]["executors"].values()}
    assert commands == {True}


def test_image_installs_the_locked_project_as_non_root_with_legacy_keras():
    assert re.search(r"^ARG VERSION=(.+)$", DOCKERFILE, re.M).group(1) == PYPROJECT["project"]["version"]
    assert "uv sync --frozen --no-dev --no-install-project" in DOCKERFILE
    assert "uv build --wheel" in DOCKERFILE and "--no-deps --no-cache --compile-bytecode" in DOCKERFILE
    for package in PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert f"COPY {package} ./{package}" in DOCKERFILE
    assert "TF_USE_LEGACY_KERAS=1" in DOCKERFILE
    assert re.findall(r"^USER (.+)$", DOCKERFILE, re.M) == ["1000:1000"]


def test_terraform_default_tpu_pool_is_the_v5e_4_preset():
    variables = (REPO / "infra" / "terraform" / "variables.tf").read_text()

    def default(name):
        block = re.search(r'variable "%s" \{(.*?)\n\}' % name, variables, re.S).group(1)
        return re.search(r'default\s+=\s+"([^"]+)"', block).group(1)

    preset = slices.get("v5e-4")
    assert (default("tpu_machine_type"), default("tpu_topology")) == (preset.machine_type,
                                                                       preset.topology)
    # Every variable and output says what it is.
    for name in ("variables.tf", "outputs.tf"):
        text = (REPO / "infra" / "terraform" / name).read_text()
        blocks = re.findall(r'^(?:variable|output) "[^"]+" \{', text, re.M)
        assert len(blocks) == text.count("description =") > 0, name


def test_the_runner_role_is_minimal_and_the_serving_bucket_is_add_only():
    import yaml

    kube = REPO / "infra" / "kubernetes" / "lockstep"
    role = yaml.safe_load((kube / "runner-role.yaml").read_text())
    binding = yaml.safe_load((kube / "runner-role-binding.yaml").read_text())
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert "runner-role.yaml" in (kube / "kustomization.yaml").read_text()
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert not {r for r, _ in granted} & {"secrets", "pods/exec", "pods/attach", "*"}, granted
    assert ("pods", "create") not in granted and ("pods", "delete") not in granted
    assert not [v for _, v in granted if v in ("*", "delete", "deletecollection", "escalate")]

    iam = (REPO / "infra" / "terraform" / "iam.tf").read_text()
    blocks = re.findall(r'resource "google_storage_bucket_iam_member" "(\w+)" \{(.*?)\n\}', iam, re.S)
    serving_grants = {}
    for _name, body in blocks:
        if "google_storage_bucket.serving.name" in body:
            member = re.search(r"google_service_account\.(\w+)\.email", body).group(1)
            roles = re.findall(r'"(roles/[\w.]+)"', body)
            serving_grants.setdefault(member, set()).update(roles)
    assert serving_grants["pipeline"] == {"roles/storage.objectViewer",
                                          "roles/storage.objectCreator",
                                          "roles/storage.legacyBucketReader"}
    assert serving_grants["models"] == {"roles/storage.objectAdmin"}
    outputs = (REPO / "infra" / "terraform" / "outputs.tf").read_text()
    serving_dir = re.search(r'output "serving_dir" \{(.*?)\n\}', outputs, re.S).group(1)
    assert "google_storage_bucket.serving.name" in serving_dir


def test_an_image_digest_pins_every_task(tmp_path):
    import yaml

    from conftest import cli

    digest = "sha256:" + "ab" * 32
    config = tmp_path / "c.toml"
    config.write_text(f'[data]\npath = "gs://b/d"\ntask = "classification"\n'
                      f'[eval]\nbounds = {{accuracy = 0.8}}\n[kubeflow]\n'
                      f'image = "r.example/lockstep"\nimage_tag = "dev"\n'
                      f'image_digest = "{digest}"\n')
    result = cli("compile", "--config", config, "--output", tmp_path / "p.yaml")
    assert result.returncode == 0, result.stderr
    spec = next(yaml.safe_load_all((tmp_path / "p.yaml").read_text()))
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {f"r.example/lockstep@{digest}"}
    config.write_text('[kubeflow]\nimage_digest = "latest"\n')
    bad = cli("compile", "--config", config, "--output", tmp_path / "q.yaml")
    assert bad.returncode == 2 and "kubeflow.image_digest must be sha256:" in bad.stderr
