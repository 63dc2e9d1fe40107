# regmem: `make test` and `make demo` create .venv on first use and install everything the project needs.
PYTHON ?= python3
VENV ?= .venv
# Pinned first: with no torch present, the bare range in pyproject.toml would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-thorough lint demo bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check src tests

test: lint
	$(VENV)/bin/pytest -q -n 2

# The property tests only (hypothesis's pytest plugin marks every @given test `hypothesis`), with 200 fresh
# random examples each instead of `make test`'s 25 fixed ones (profiles in tests/conftest.py).
test-thorough: install
	HYPOTHESIS_PROFILE=thorough $(VENV)/bin/pytest -q -n 2 -m hypothesis

# Four mixers at 16 pairs, each at its tuned learning rate (src/regmem/lab/experiments/tuned_lr.json), seeds 0, 1 and 2.
demo: install
	$(VENV)/bin/regmem compare mqar --preset quick --sweep num_kv_pairs=16 --mixers attn,linear,mamba2,gated_deltanet \
		--seeds 0,1,2 --workers 2

bench: install
	$(VENV)/bin/regmem bench ops

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache .hypothesis
