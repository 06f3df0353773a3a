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
