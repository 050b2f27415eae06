# The README's two commands: `make demo` (set up, then a short training run) and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
PAGE := drlcli/dashboard/static/index.html
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export MUJOCO_GL ?= egl

.PHONY: setup demo test lint clean

setup: $(VENV)/.installed $(PAGE)

# constraints.txt pins the tested versions (torch==2.13.0 among them); pyproject.toml has ranges.
$(VENV)/.installed: pyproject.toml constraints.txt examples/twin_encoder_actor/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	# The downstream-package example: the tests train it through Ray.
	$(BIN)/python -m pip install --quiet -c constraints.txt -e examples/twin_encoder_actor
	touch $@

# The dashboard page (web/, npm): built into the package; without npm the JSON API still works.
$(PAGE): web/package.json web/package-lock.json web/build.mjs $(wildcard web/src/*)
	@if command -v npm >/dev/null 2>&1; then \
		cd web && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build; \
	else \
		echo "warning: npm not found: the dashboard page is not built (drl dashboard serves the API only)"; \
	fi

demo: setup
	$(BIN)/drl train quickstart

test: setup
	$(BIN)/python -m pytest
	@if [ -d web/node_modules ]; then cd web && npm test --silent; fi

lint: setup
	$(BIN)/ruff check drlcli tests scripts examples
	$(BIN)/python -m compileall -q drlcli scripts tests examples

clean:
	rm -rf $(VENV) output .pytest_cache .ruff_cache web/node_modules drlcli/dashboard/static
