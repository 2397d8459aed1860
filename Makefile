# The two commands: `make demo` and `make test`. Both create or reuse .venv in the checkout.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
NATIVE_VENV := .venv-native
# vLLM 0.33 built for this machine's CPU (native late-chunking tests); absent elsewhere.
VLLM033_WHEELS ?= $(wildcard ../shared/wheels)
QUIET_PIP := sed -u '/^WARNING: Location/d'
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test check lint test-main test-airflow test-native dev clean ocr-tools bench-quick

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip 2>&1 | $(QUIET_PIP)
	$(VENV)/bin/pip install -q -e ".[cpu,model,ui,dev,airflow,clients,documents,ocr]" 2>&1 | $(QUIET_PIP)
	# dagster-k8s for tests/test_deploy.py: each release pins one dagster exactly, and the registry
	# has no 0.29.28 (dagster 1.13.28's); 0.29.27 without its pin (its other dependencies are in dev)
	$(VENV)/bin/pip install -q --no-deps dagster-k8s==0.29.27 2>&1 | $(QUIET_PIP)
	# Dagster's `dg` command for tests/test_readme.py (it lists the component): likewise the registry
	# has no dagster-dg-cli 1.13.28; 1.13.27 and its dagster-rest-resources without their pins, beside
	# dagster-dg-core 1.13.28 (with its dependencies, none of which moves a package already installed)
	$(VENV)/bin/pip install -q dagster-dg-core==1.13.28 2>&1 | $(QUIET_PIP)
	$(VENV)/bin/pip install -q --no-deps dagster-dg-cli==1.13.27 dagster-rest-resources==0.29.27 2>&1 | $(QUIET_PIP)
	# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside torch 2.13+cpu
	$(VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec 2>&1 | $(QUIET_PIP)
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/python -m latechunk_dagster.app.demo

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check latechunk_dagster tests bench
	$(VENV)/bin/ruff format --check latechunk_dagster tests bench

# Test modules run on $(WORKERS) worker processes (pytest-xdist); --dist loadfile keeps a module's tests,
# its fixtures and its in-process engine in one worker. 2 matches the 2-core machines this is measured
# on (docs/testing.md); each worker holds its own engine (1-3 GB), so raise it with the memory too.
WORKERS ?= 2
XDIST := -n $(WORKERS) --dist loadfile

# Tesseract for tests/test_ocr.py: installed when missing (scripts/ensure-ocr.sh; `make demo` needs none).
ocr-tools:
	@bash scripts/ensure-ocr.sh

test-main: $(VENV)/.installed ocr-tools
	$(VENV)/bin/python -m pytest $(XDIST) -m "not native" tests --ignore-glob='tests/test_airflow*' --doctest-modules latechunk_dagster/core/chunking --durations=20

# The fast tier: ruff, then the unit and contract tests on the module's shared engine (no servers,
# daemon, scheduler or subprocess fleets: tests/conftest.py SLOW_MODULES), with the 20 slowest tests,
# then every bench script's --quick smoke run (bench-quick).
check: lint ocr-tools
	$(VENV)/bin/python -m pytest $(XDIST) -m "not native and not slow" tests --ignore-glob='tests/test_airflow*' --doctest-modules latechunk_dagster/core/chunking --durations=20
	$(MAKE) --no-print-directory bench-quick

# Every bench/*.py with --quick, one at a time, each under BENCH_QUICK_TIMEOUT seconds: one line per
# script (name, seconds, ok/FAILED); fails if any fails. No figure is checked, only that it runs.
BENCH_QUICK_TIMEOUT ?= 180
bench-quick: $(VENV)/.installed ocr-tools
	PY=$(VENV)/bin/python BENCH_QUICK_TIMEOUT=$(BENCH_QUICK_TIMEOUT) bash scripts/bench-quick.sh

# Airflow's tests in a pytest process of their own: importing Airflow configures process-wide
# state (AIRFLOW_HOME, its logging, its ORM) that the other tests should not run under.
test-airflow: $(VENV)/.installed
	$(VENV)/bin/python -m pytest $(XDIST) -m "not native" tests/test_airflow.py tests/test_airflow_granularities.py tests/test_airflow_generations.py tests/test_airflow_provider.py tests/test_airflow_scheduler.py tests/test_airflow_store_s3.py tests/test_airflow_store_reading.py

# Skips (one "SKIPPED native-path tests: <reason>" line) where the vLLM 0.33 build cannot run:
# no ../shared/wheels, or its install script exits 3 (the CPU lacks what the build needs).
test-native:
	@status=0; bash scripts/native-venv.sh "$(VLLM033_WHEELS)" "$(PY)" "$(NATIVE_VENV)" || status=$$?; \
	if [ $$status -eq 3 ]; then exit 0; elif [ $$status -ne 0 ]; then exit $$status; fi; \
	$(NATIVE_VENV)/bin/python -m pytest -m native tests/native

test: lint test-main test-airflow test-native

# `dg dev`, not `dagster dev` (a SupersessionWarning on every start); PYTHONWARNINGS hides the two
# "Found version mismatch" lines of this venv's dg 1.13.27 beside dagster 1.13.28 (settings.DG_QUIET)
dev: $(VENV)/.installed
	DAGSTER_HOME=$$($(VENV)/bin/python -c 'from latechunk_dagster.app.settings import ensure_dagster_home as h; print(h())') \
		PYTHONWARNINGS="$${PYTHONWARNINGS:-ignore:Found version mismatch}" \
		$(VENV)/bin/dg dev -m latechunk_dagster.app.definitions

clean:
	rm -rf $(VENV) $(NATIVE_VENV) data
