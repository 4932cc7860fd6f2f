# Template repository tasks. `make demo` and `make test` are the two commands the README promises work on a fresh
# machine with only Python 3.11 and make.
.DEFAULT_GOAL := help
SHELL := bash
PYTHON ?= python3
# uv from PATH, else the copy `make uv` installs with pip (python -m uv works for a pip-installed uv).
UV ?= $(if $(shell command -v uv 2>/dev/null),uv,$(PYTHON) -m uv)
BUILD ?= build
DEMO_DIR := $(BUILD)/demo
PYTEST_ARGS ?=
RELOCK_ARGS ?=

.PHONY: help uv install platform-env test test-template-quick test-platform test-e2e test-matrix lint format relock server-requirements demo bench clean

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

uv: ## Install uv with pip when it is not on PATH
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv>=0.5"

install: uv ## Create .venv with the template's test tools (from uv.lock)
	$(UV) sync --locked

# The template's tests that install nothing (one process, about 3 minutes) beside the platform's suite (2 workers),
# each target's output printed whole when it ends (-O); then the two baked projects' installs and suites, which
# use both cores alone. On 2 cores the first two together take about as long as the platform's suite alone.
test: install ## Run the template test suite (bakes, lints, baked projects' own tests) and the platform's
	$(MAKE) --no-print-directory -j2 -O test-template-quick test-platform UV="$(UV)"
	$(UV) run --locked pytest -m "generated and not matrix and not e2e" $(PYTEST_ARGS)

test-template-quick: install platform-env ## The template's tests that install no baked project (bakes, hooks, lints, workflows)
	$(UV) run --locked pytest -m "not generated and not matrix and not e2e" $(PYTEST_ARGS)

# The platform's environment (platform/uv.lock, at the versions a generated project locks), synced once before
# both test targets: the quick tests run the platform's CLI from it through `uv run` with every request sent to a
# dead proxy, and a stale editable install would be rebuilt there, which needs the build backend from the index.
platform-env: uv
	$(UV) sync --project platform --locked --quiet

# Both tiers, 2 workers (each starts its own moto and MLflow servers; --dist loadfile keeps a module's session
# fixtures in one process).
test-platform: platform-env ## Run the platform's own tests (platform/tests: its doubles, stacks, runner lifecycle)
	$(UV) run --project platform --locked pytest -n 2 --dist loadfile platform/tests $(PYTEST_ARGS)

test-e2e: install ## Bake the defaults and run their `make e2e`: every offline story and the fault table (~17 min)
	$(UV) run --locked pytest -m e2e -s $(PYTEST_ARGS)

test-matrix: install ## Bake and check every option combination (slow)
	$(UV) run --locked pytest -m matrix $(PYTEST_ARGS)

lint: install ## ruff on the template's own Python (the baked project is linted by the tests)
	$(UV) run --locked ruff check tests scripts benchmarks platform
	$(UV) run --locked ruff format --check tests scripts benchmarks platform

format: install ## Apply ruff fixes and formatting to the template's own Python
	$(UV) run --locked ruff check --fix tests scripts benchmarks platform
	$(UV) run --locked ruff format tests scripts benchmarks platform

relock: install ## Regenerate the generated project's uv.lock after changing its pyproject.toml (RELOCK_ARGS=--upgrade: all afresh)
	$(UV) run --locked python scripts/relock.py $(RELOCK_ARGS)

# After relock moves mlflow or boto3 (platform/tests/runner/test_mlflow_server_requirements.py fails until then):
# the team MLflow server's hash-pinned closure the platform ships, compiled against platform/uv.lock. Needs PyPI.
server-requirements: uv ## Recompile the MLflow server requirements the platform ships (platform/src/gpu_runner/mlflow_server/server-requirements.txt)
	cd platform && $(UV) run --locked gpu-runner mlflow-server requirements --lock uv.lock \
		--output src/gpu_runner/mlflow_server/server-requirements.txt --header "make server-requirements" --uv "$(UV)"

# The demo bake pins the platform at this checkout's HEAD under a stand-in GitHub name, and git's insteadOf makes
# uv fetch it from here: offline, and no GitHub repository needed (the checkout must be clean).
DEMO_PLATFORM := your-org/mlops-template
DEMO_GIT := GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=url.file://$(CURDIR).insteadOf \
	GIT_CONFIG_VALUE_0=https://github.com/$(DEMO_PLATFORM)

demo: install ## Bake the defaults into build/demo and run the offline story: push -> GPU runner -> MLflow -> teardown
	rm -rf $(DEMO_DIR)
	$(UV) run --locked cookiecutter --no-input --output-dir $(DEMO_DIR) . platform_repository=$(DEMO_PLATFORM)
	cd $(DEMO_DIR)/*/ && git init -q && git add -A \
		&& git -c user.name=demo -c user.email=demo@example.invalid commit -q -m "baked from the template" \
		&& $(DEMO_GIT) $(MAKE) install UV="$(UV)" && $(DEMO_GIT) $(MAKE) story UV="$(UV)"
	@project=$$(cd $(DEMO_DIR)/*/ && pwd); printf '%s\n' "" "Demo project: $$project" \
		"  report (timeline, MLflow run, fault table): $$project/.e2e-cache/report.json" \
		"  every story and fault (~16 min, 2 workers): cd $$project && make e2e" \
		"  train locally and browse runs:              cd $$project && make train && make mlflow-ui"

bench: install ## Print bake, install, test-suite, pipeline throughput, offline-story and GPU cost figures, and the platform's study storage
	$(UV) run --locked python benchmarks/run.py
	$(UV) run --project platform --locked python platform/benchmarks/study_storage_bench.py

clean: ## Remove build output
	rm -rf $(BUILD) .pytest_cache
