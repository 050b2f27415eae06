# The README's two commands: `make demo` (set up, then a short training run) and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export MUJOCO_GL ?= egl

.PHONY: setup demo test lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml examples/twin_encoder_actor/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# The downstream-package example: the tests train it through Ray.
	$(BIN)/python -m pip install --quiet -e examples/twin_encoder_actor
	touch $@

demo: setup
	$(BIN)/drl train configs/quickstart.yaml

test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check drlcli tests scripts examples
	$(BIN)/python -m compileall -q drlcli scripts tests

clean:
	rm -rf $(VENV) output .pytest_cache .ruff_cache
