# scribe-emu: `make run` runs the default experiment, `make test` the test suite.
# Both create the virtualenv (.venv) and check for Java first.

SHELL  := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
ARGS   ?=
TESTS  ?= tests

.PHONY: help venv warm java run quick test test-fast bench bench-report lint clean

help:
	@echo "make run    - run the small_groups_30k scenario (ARGS='--nodes 5000 ...' to override)"
	@echo "make quick  - run the quick scenario (seconds)"
	@echo "make test   - run the whole test suite (TESTS=tests/test_cli.py for one file)"
	@echo "make test-fast - tests not marked slow (no Ray/Spark start)"
	@echo "make venv   - create .venv and install -e '.[dev]' with uv, or pip (again when pyproject.toml changes)"
	@echo "make warm   - compile the default scenario's kernels once (make run and make quick do it)"
	@echo "make java   - install OpenJDK 17 (as root, apt-get) when java is missing"
	@echo "make bench  - run benchmarks/bench_*.py"
	@echo "make bench-report - render BENCHMARKS.md's tables from benchmarks/results/*.json"
	@echo "make lint   - ruff check"

venv: $(VENV)/.installed

# The stamp file makes the (slow) install re-run only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: python3.11 (or python3) not found on PATH" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)' \
	  || { echo "error: $(PYTHON) is $$($(PYTHON) -V 2>&1); scribe-emu needs Python 3.11 or 3.12" >&2; exit 1; }
	@if [ ! -x $(PY) ]; then \
	  rm -rf $(VENV); \
	  if ! $(PYTHON) -m venv $(VENV) 2>/dev/null; then \
	    rm -rf $(VENV); \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      echo "python venv module missing: installing python3-venv"; \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv \
	      && $(PYTHON) -m venv $(VENV); \
	    else \
	      echo "error: '$(PYTHON) -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2; exit 1; \
	    fi; \
	  fi; \
	fi
	@# uv resolves and installs the same versions as pip, faster; pip does it where uv
	@# cannot be had or fails (an index reachable only through pip's own configuration).
	@# --compile-bytecode: the .pyc files pip writes at install; without them every
	@# process (Ray's workers, Spark's; the test suite starts hundreds) compiles what it
	@# imports again wherever PYTHONDONTWRITEBYTECODE is set
	$(PY) -m pip install --quiet uv \
	  && $(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -e '.[dev]' \
	  || { echo "uv failed: installing with pip"; $(PY) -m pip install --quiet --upgrade pip \
	       && $(PY) -m pip install --quiet -e '.[dev]'; }
	touch $@

# numba's kernels of the default scenario compile once per machine and version of their
# sources (the files emulator/kernel_sources.py lists, which emulator/jit_cache.py keys
# the cache by), before the first `make run` / `make quick`, not inside it
# (scenarios/warm.py); the test session compiles what it needs itself, in the background
# (tests/warm_kernels.py)
KERNEL_SOURCES := $(shell python3 emulator/kernel_sources.py)
warm: $(VENV)/.warmed

$(VENV)/.warmed: $(VENV)/.installed $(KERNEL_SOURCES)
	@if $(PY) cli.py warm; then touch $@; \
	else echo "warning: kernels not precompiled (above); the first run compiles them" >&2; fi

java:
	@if [ -n "$${JAVA_HOME:-}" ] && [ -x "$$JAVA_HOME/bin/java" ]; then exit 0; fi; \
	if command -v java >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "java not found: installing openjdk-17-jre-headless (Spark needs Java 17)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; \
	else \
	  echo "error: java not found; Spark needs Java 17: run 'sudo apt-get install openjdk-17-jre-headless' (or set JAVA_HOME) and retry" >&2; \
	  exit 1; \
	fi

run: venv warm java
	$(PY) cli.py scenario small_groups_30k $(ARGS)

quick: venv warm java
	$(PY) cli.py scenario quick $(ARGS)

# --durations: the slowest tests at the end of every run (the whole CI run's target is
# 12 minutes on the 2-core machine)
test: venv java
	$(PY) -m pytest -q --durations=15 $(TESTS) $(ARGS)

test-fast: venv
	$(PY) -m pytest -q -m "not slow" $(TESTS) $(ARGS)

bench: venv java
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b $(ARGS); done

# BENCHMARKS.md's tables from the benchmarks' records (benchmarks/report.py --check: compare only)
bench-report: venv
	$(PY) benchmarks/report.py

lint: venv
	$(PY) -m ruff check .

clean:
	rm -rf .pytest_cache .ruff_cache build *.egg-info
