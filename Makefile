# Set-up and the everyday commands (`make test` runs `make lint` first). `make quickstart`,
# `make lint` and `make test` create .venv on first use: torch first (the CPU wheel 2.13.0 that
# pip finds on this machine), then flnet with its test extras (ruff, mypy and stubs included). To
# use your own torch build instead: make TORCH_SPEC="torch==<your version>", or install flnet
# into your own environment with `pip install -e ".[test]"`.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: quickstart test lint bench bench-pfl docs setup clean

# --force: each `make quickstart` replaces the previous one's results in runs/quickstart/
quickstart: $(VENV)/.installed
	$(BIN)/flnet run scenarios/quickstart.yaml --force

# lint first: a finding stops `make test` before the suite runs. The suite runs on every core
# (pytest-xdist); the tests of one xdist_group share a worker. `make test PYTEST_ARGS=` runs it
# in one process, one test after another.
PYTEST_ARGS ?= -n auto --dist loadgroup
test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# ruff (lint and format) over the whole tree, then mypy over flnet/ (both set in pyproject.toml)
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# the `bench` extra (Flower 1.41 with Ray, for W1 side by side) is installed here only
bench: $(VENV)/.bench
	$(BIN)/python benchmarks/bench.py

$(VENV)/.bench: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[test,bench]"
	touch $@

# pfl-research 0.6 for W1 and C1 side by side, in an environment of its own (.venv-pfl: torch,
# then pfl[pytorch]; pfl's pins would change flnet's own packages); bench.py runs
# benchmarks/pfl_side.py there as fresh processes, beside flnet's
bench-pfl: $(VENV)/.installed .venv-pfl/.installed
	$(BIN)/python benchmarks/bench.py --c1
	$(BIN)/python benchmarks/bench.py --w1

.venv-pfl/.installed:
	$(PYTHON) -m venv .venv-pfl
	.venv-pfl/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	.venv-pfl/bin/python -m pip install --quiet "pfl[pytorch]==0.6.*"
	touch $@

# the `docs` extra (MkDocs, Material, mkdocstrings) is installed here only; the site goes to
# build/site/ (mkdocs.yml), built strictly: a broken link, a missing page or an unknown
# reference fails
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

$(VENV)/.docs: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[test,docs]"
	touch $@

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

clean:
	rm -rf $(VENV) runs build/site
