# Quick start:  make demo   (offline agent conversation on the file checkpointer)
#               make test   (the whole test suite)
# Both create or reuse a local virtualenv in .venv and install what they need.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
PYTEST_ARGS ?=

.PHONY: demo test lint typecheck bench services clean

$(PY):
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tulip_nb needs Python >= 3.11, got " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(PY)
	$(PIP) install -e .
	@touch $@

$(VENV)/.dev-installed: pyproject.toml | $(PY)
	$(PIP) install -e '.[all,dev]'
	@touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(PY) -m tulip_nb._demo

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check tulip_nb tests bench scripts

typecheck: $(VENV)/.dev-installed
	$(VENV)/bin/mypy

# The gates: ruff check, ruff format --check, mypy strict on the package, then pytest (the tests
# and every module's >>> examples).
test: $(VENV)/.dev-installed lint typecheck
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure here"; exit 1; fi; \
	exit $$rc

$(VENV)/.bench-installed: pyproject.toml | $(PY)
	$(PIP) install -e '.[all,dev,bench]'
	@touch $@

bench: $(VENV)/.bench-installed
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache demo_threads
