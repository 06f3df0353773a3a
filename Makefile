# Two commands on a fresh machine with python3 and pip: `make run` and `make test`.
UV := $(shell command -v uv 2>/dev/null)
ifeq ($(UV),)
UV := python3 -m uv
endif
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: setup run test test-fast bench
setup:
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	$(UV) sync --frozen

run: setup
	$(UV) run --frozen lockstep run $(ARGS)

test: setup
	$(UV) run --frozen pytest -q -p no:cacheprovider tests

test-fast: setup
	$(UV) run --frozen pytest -q -m "not slow" tests

bench: setup
	$(UV) run --frozen python benchmarks/pipeline_e2e.py
	$(UV) run --frozen python benchmarks/trainer_throughput.py
