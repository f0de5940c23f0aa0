# The two commands the README promises, and the steps behind them.
#   make demo   set everything up, then load a small dataset in each format beside the baseline
#   make test   set everything up if needed, then Rust tests, pytest and the lints
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
VENV_ABS := $(abspath $(VENV))
PY := $(VENV_ABS)/bin/python
STAMP := $(VENV)/.installed
# maturin and the tools it calls come from the virtual environment.
export VIRTUAL_ENV := $(VENV_ABS)
export PATH := $(VENV_ABS)/bin:$(PATH)

.PHONY: all demo test rust-test py-test lint bench develop lock clean wheel wheel-test docs

all: test

$(STAMP): requirements/dev.in requirements/lock.txt
	@command -v cargo >/dev/null || { echo "cargo (Rust) is required: https://rustup.rs" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/dev.in -c requirements/lock.txt
	touch $@

# Builds the extension in release mode into the virtual environment (editable: python/ is used
# in place, the compiled module is copied next to it). The module is built for the stable ABI
# (`_packread.abi3.so`); a per-version build left from before would shadow it, so it goes.
develop: $(STAMP)
	rm -f python/packread/_packread.cpython-*.so
	maturin develop --release --quiet

demo: develop
	$(PY) examples/demo.py

test: develop
	$(MAKE) --no-print-directory rust-test py-test lint wheel-test

rust-test: $(STAMP)
	cargo test --quiet

py-test: develop
	$(PY) -m pytest -q tests

lint: develop
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings
	cargo clippy --quiet --all-targets --features python -- -D warnings
	ruff check .
	ruff format --check .
	$(PY) -m mypy.stubtest packread._packread

# The abi3 wheel (one for every CPython >= 3.10, libhdf5 inside) in dist/. Same features and
# flags as `develop`, so cargo reuses that build.
wheel: $(STAMP)
	rm -rf dist
	maturin build --release --quiet --out dist

# Installs the wheel into a fresh virtual environment with only numpy and reads every format
# there; checks the abi3 tag, the stable-ABI symbols (abi3audit) and the shared libraries.
wheel-test: wheel
	PACKREAD_WHEEL="$$(ls dist/*.whl)" $(PY) -m pytest -q tests/test_wheel.py

# API reference from the docstrings, in site/api (open site/api/index.html).
docs: develop
	rm -rf site/api
	$(PY) -m pdoc --docformat restructuredtext -o site/api \
		packread packread.torch packread.cli packread.cli.inspect \
		packread.cli.convert packread.cli.bench

# Python-level benchmarks against h5py / numpy / zipfile (`cargo bench` for the Rust core).
bench: develop
	$(PY) -m pytest benches -q --benchmark-only --benchmark-json=.bench/latest.json -p no:cacheprovider
	$(PY) benches/report.py .bench/latest.json

# Re-pins the whole dependency tree after changing requirements/dev.in.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements/dev.in
	.lock-venv/bin/pip freeze > requirements/lock.txt && rm -rf .lock-venv

clean:
	rm -rf $(VENV) target .bench dist site python/packread/*.so
