# Quick start:  make demo   (offline agent conversation on the file checkpointer)
#               make quick  (the inner loop: a couple of minutes, no server, no browser)
#               make test   (the gates and the whole test suite)
# Each creates or reuses a local virtualenv in .venv and installs what it needs.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
PYTEST_ARGS ?=

.PHONY: demo quick test lint typecheck bench services clean

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

# The inner loop: ruff check, then the unit tests and the conformance suite on memory and file,
# minus the tests marked slow, service, interop or browser, with hypothesis's "dev" profile (10
# fresh examples). A new unit test is in it unless it is marked; TULIP_NB_NO_SERVICES=1 makes any
# test that asks for a server skip. `make quick QUICK_PATHS=tests/lab` runs the same selection on
# another folder; `make quick PYTEST_ARGS="-k diff -x"` narrows it.
QUICK_PATHS ?= tests/unit tests/backends/test_conformance.py
QUICK_MARKS ?= not slow and not service and not interop and not browser
quick: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} TULIP_NB_NO_SERVICES=1 \
	  $(PY) -m pytest -q -m "$(QUICK_MARKS)" $(QUICK_PATHS) $(PYTEST_ARGS)

# The gates: ruff check, ruff format --check, mypy strict on the package, then pytest (the tests,
# slow ones included, and every module's >>> examples) with hypothesis's derandomised "ci" profile.
test: $(VENV)/.dev-installed lint typecheck
	@HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure here"; exit 1; fi; \
	exit $$rc

$(VENV)/.bench-installed: pyproject.toml | $(PY)
	$(PIP) install -e '.[all,dev,bench]'
	@touch $@

bench: $(VENV)/.bench-installed
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis demo_threads
