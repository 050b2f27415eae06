# The README's two commands: `make demo` (set up, then a short training run) and `make test`.
# The first Python 3.11 or later on PATH (3.11 is the tested one); `make demo PYTHON=...` names another.
PYTHON ?= $(shell for candidate in python3.11 python3.12 python3.13 python3 python; do \
	$$candidate -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && \
	{ echo $$candidate; break; }; done)
FIND_PYTHON = @test -n "$(PYTHON)" || { echo "error: no Python 3.11 or later on PATH: install one, or name it: make demo PYTHON=/path/to/python3.11" >&2; exit 2; }
VENV ?= .venv
BIN := $(VENV)/bin
PAGE := drlcli/dashboard/static/index.html
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export MUJOCO_GL ?= egl

.PHONY: setup demo test test-fast mutation test-latest test-robotics lint clean

setup: $(VENV)/.installed $(PAGE)

# constraints.txt pins the tested versions (torch==2.13.0 among them); pyproject.toml has ranges.
PIP_INSTALL := $(BIN)/python -m pip install --quiet -c constraints.txt
SITE_PACKAGES = $(shell $(BIN)/python -c "import sysconfig; print(sysconfig.get_path('purelib'))")

# drl itself: what drl train, play, export, verify, compare and dashboard need (make demo).
# --no-compile: byte-compiling every module of torch, Ray, SciPy and matplotlib is a quarter of
# make demo's time, and the demo imports a fraction of them.
$(VENV)/.installed-drl: pyproject.toml constraints.txt
	$(FIND_PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --no-compile -e .
	touch $@

# Then what the demo left out: the byte code (the suite starts hundreds of processes, and where
# PYTHONDONTWRITEBYTECODE is set none of them would keep what it compiled), the dev extra (the
# test tools, drl tune's Ray Tune and Optuna, the metrics sinks) and the downstream-package
# example, which the tests train through Ray.
$(VENV)/.installed: $(VENV)/.installed-drl examples/twin_encoder_actor/pyproject.toml
	@# What a package ships that this Python cannot compile (torch's 3.12-only test helpers) is
	@# left as source, as pip's own compilation leaves it: compileall's status is not an error.
	-$(BIN)/python -m compileall -q -j 0 $(SITE_PACKAGES) > /dev/null 2>&1
	$(PIP_INSTALL) -e ".[dev]"
	$(PIP_INSTALL) -e examples/twin_encoder_actor
	touch $@

# The dashboard page (web/, npm): built into the package; without npm the JSON API still works.
$(PAGE): web/package.json web/package-lock.json web/build.mjs $(wildcard web/src/*)
	@if command -v npm >/dev/null 2>&1; then \
		cd web && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build; \
	else \
		echo "warning: npm not found: the dashboard page is not built (drl dashboard serves the API only)"; \
	fi

# The short training run on the embedded default: drl alone, no dev tools, no page build.
demo: $(VENV)/.installed-drl
	$(BIN)/drl train quickstart

# Two pytest-xdist workers, each with its own Ray session when its tests need one
# (tests/conftest.py); both cores stay busy. --dist loadgroup: a module whose tests share an
# expensive module fixture (a two-node cluster, an install, a trained run) names an
# xdist_group and runs on one worker, so the fixture is built once, not once per worker.
test: setup
	$(BIN)/python -m pytest -n 2 --dist loadgroup
	@if [ -d web/node_modules ]; then cd web && npm test --silent; fi

# The edit-test loop: the tests that need neither Ray nor a subprocess (a test that starts a
# process anyway fails here, naming the marker it lacks), with half of the fuzz cases (the
# first half of the same derandomised ones; make test runs them all), on two xdist workers.
test-fast: setup
	DRL_TEST_FAST=1 DRL_FUZZ_EXAMPLES=$${DRL_FUZZ_EXAMPLES:-0.5} \
		$(BIN)/python -m pytest -m "not ray and not subprocess" -q -n 2

# Mutation testing of the maths modules ([tool.mutmut] in pyproject.toml): the score, and each
# surviving mutant not explained in tests/equivalent_mutants.md. Hours on two cores; not CI.
mutation: setup
	rm -rf mutants
	$(BIN)/mutmut run --max-children $${MUTATION_JOBS:-2}
	$(BIN)/python scripts/mutation_score.py

# The suite on the newest versions pyproject.toml's ranges admit (no constraints): several GB
# (a CUDA torch); not CI. docs/contributing.md records the last versions seen.
LATEST := .venv-latest
test-latest: $(PAGE)
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet -e ".[dev]" -e examples/twin_encoder_actor
	$(LATEST)/bin/python -m pip freeze | grep -i -E "^(torch|numpy|gymnasium|mujoco|ray|onnx|onnxruntime)=="
	$(LATEST)/bin/python -m pytest

# drl on the robotics packages (scripts/robotics_check.py): per tested set, a virtual
# environment with the set's MuJoCo and packages (constraints-robotics-SET.txt, the extra of the
# same name), then a short run of its tasks through train, verify, play --video and export.
# A download of its own and minutes per set; not CI.
ROBOTICS_SETS := dmc metaworld
test-robotics: $(PAGE)
	@for set in $(ROBOTICS_SETS); do \
		venv=.venv-robotics-$$set; \
		$(PYTHON) -m venv $$venv && \
		$$venv/bin/python -m pip install --quiet -c constraints-robotics-$$set.txt -e ".[$$set]" && \
		$$venv/bin/python scripts/robotics_check.py $$set || exit 1; \
	done

lint: setup
	$(BIN)/ruff check drlcli tests scripts examples
	$(BIN)/python -m compileall -q drlcli scripts tests examples

clean:
	rm -rf $(VENV) $(LATEST) .venv-robotics-* mutants output .pytest_cache .ruff_cache web/node_modules drlcli/dashboard/static
