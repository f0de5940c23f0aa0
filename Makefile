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

.PHONY: all demo test rust-test py-test py-test-slow lint bench bench-images bench-loaders bench-shards bench-remote bench-mix bench-stats bench-ray bench-jpeg bench-peers bench-wheel bench-builds develop lock clean \
	wheel wheel-test sdist-test compat-test docs \
	fuzz fuzz-build fuzz-long fuzz-seeds fuzz-tools fuzz-files fuzz-files-long miri

all: test

$(STAMP): requirements/dev.in requirements/lock.txt
	@command -v cargo >/dev/null || { echo "cargo (Rust) is required: https://rustup.rs" >&2; exit 1; }
	@# libjpeg-turbo's SIMD kernels (built from source by turbojpeg-sys) are assembled by nasm.
	@command -v nasm >/dev/null || { apt-get update -qq && apt-get install -y -qq nasm; }
	@# nginx serves the HTTP read tests' files (tests/python/support/objstore.py).
	@command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx; }
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
	$(PY) -m pytest -q tests/python

# The long-run tests (10^5 open/batch/close cycles per reader, 16 threads for a minute): ~15 min
# on 2 cores, so not part of `make test` (see docs/RELIABILITY.md).
py-test-slow: develop
	$(PY) -m pytest -q -m slow --run-slow tests/python

lint: develop
	cargo fmt --check
	cargo clippy --quiet --all-targets --features encoders -- -D warnings
	cargo clippy --quiet --all-targets --features python -- -D warnings
	ruff check .
	ruff format --check .
	$(PY) -m mypy.stubtest packread._packread

# The release wheel and the sdist, in dist/. The wheel is abi3 (one for every CPython >= 3.10)
# and manylinux2014 (glibc >= 2.17, the tag h5py, numpy and torch ship), libhdf5 and every codec
# inside, stripped; a report (size, auditwheel's tag, the newest GLIBC symbol) ends the build.
# Why zig: the extension links glibc's symbols at the versions of the machine that builds it
# (2.36 here), and no manylinux container runs here (no Docker engine). `maturin --zig` links
# with zig (PyPI's ziglang, in requirements/dev.in), which carries glibc 2.17's symbol versions,
# and hands the same zig to the C builds: to cc (CC_<target>: c-blosc2, zlib, zstd, lz4,
# libdeflate) and to CMake (a toolchain file: libhdf5, libjpeg-turbo with nasm). zig 0.17:
# 0.14-0.16 ship a clang that refuses libdeflate's AVX-512 kernels ("requires evex512").
# Its own target directory: another compiler than `develop`'s gcc, so sharing one would rebuild
# every C library at each switch. And one per checkout: the zig compiler CMake records in its
# cache (libhdf5's, libjpeg-turbo's) is a wrapper script that runs this checkout's
# .venv/bin/maturin, and CMake never re-reads a cached compiler, so a build directory another
# clone configured fails once that clone is gone ("maturin: not found") when CARGO_TARGET_DIR
# is shared (as .ci/run shares it).
CHECKOUT_KEY := $(shell printf '%s' '$(CURDIR)' | cksum | cut -d' ' -f1)
WHEEL_TARGET_DIR = $${CARGO_TARGET_DIR:-$(CURDIR)/target}/manylinux2014-$(CHECKOUT_KEY)

wheel: $(STAMP)
	rm -rf dist
	CARGO_TARGET_DIR="$(WHEEL_TARGET_DIR)" maturin build --release --quiet --out dist \
		--zig --compatibility manylinux2014
	maturin sdist --out dist
	$(PY) tests/python/support/wheel.py dist/*.whl

# Checks the wheel (manylinux_2_17 by auditwheel, no GLIBC symbol newer than 2.17, the system
# libraries only, the stable ABI, no debug info), then installs it into a fresh virtual
# environment of each CPython 3.10-3.13 found here (pyenv's or the PATH's; one that is missing
# is skipped, saying so) holding only numpy, and reads every format there; and with the `cli`
# extra, runs `packread --help` and a conversion.
wheel-test: wheel
	PACKREAD_WHEEL="$$(ls dist/*.whl)" $(PY) -m pytest -q -rs tests/python/test_wheel.py

# Installs the sdist into a fresh virtual environment: a whole build from source (Rust, CMake
# from PyPI, nasm), ~8 minutes on 2 cores, so not part of `make test`.
sdist-test: wheel
	PACKREAD_SDIST="$$(ls dist/*.tar.gz)" $(PY) -m pytest -q -rs --run-slow tests/python/test_sdist.py

# The oldest torch and numpy packread supports, tested: torch 2.1.2 (torchvision 0.16.2) with
# numpy 1.26.4, in .venv-compat (~3 GB: torch's CUDA wheels), every other package as locked.
# Runs pytest on this checkout's build (`make develop`), but for the object-storage tests (their
# servers' packages are not installed there). torch < 2.4 has no StatefulDataLoader (torchdata
# >= 0.8) and torch < 2.3 no uint16/32/64 tensors: those tests skip, saying so. Not part of
# `make test` (the download); docs/install.md's support matrix gives its last result.
COMPAT_PINS := numpy==1.26.4 torch==2.1.2 torchvision==0.16.2
COMPAT_VENV := .venv-compat

compat-test: develop
	rm -rf $(COMPAT_VENV) && $(PYTHON) -m venv $(COMPAT_VENV)
	grep -viE '^(numpy|torch|torchvision|torchdata|triton|nvidia-)' requirements/lock.txt \
		> $(COMPAT_VENV)/constraints.txt
	$(COMPAT_VENV)/bin/pip install --quiet --disable-pip-version-check $(COMPAT_PINS) \
		pytest hypothesis h5py tables hdf5plugin scikit-image pillow matplotlib tqdm bitshuffle \
		spdl -c $(COMPAT_VENV)/constraints.txt
	echo "$(CURDIR)/python" \
		> "$$($(COMPAT_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/packread.pth"
	$(COMPAT_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider tests/python \
		--ignore tests/python/test_remote.py --ignore tests/python/test_torch_remote.py \
		--ignore tests/python/test_objstore_servers.py

# The HTML site in site/ (open site/index.html): the guides (README.md, docs/*.md, the
# changelog, the benchmark results) and the API reference rendered from the docstrings, by
# mkdocs with mkdocstrings (mkdocs.yml, scripts/docs_site.py). Strict: a broken link or
# anchor, a page missing from the nav or a module that does not load fails the build. The
# tools (requirements/docs.txt) go into .venv with the lock as constraints. The reference
# inspects the built extension for the docstrings written in Rust, hence `develop`. Not part
# of `make test`.
DOCS_STAMP := $(VENV)/.docs

docs: develop $(DOCS_STAMP)
	rm -rf site
	$(PY) -m mkdocs build --strict --site-dir site

$(DOCS_STAMP): requirements/docs.txt requirements/lock.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/docs.txt \
		-c requirements/lock.txt
	touch $@

# Python-level benchmarks against h5py / numpy / zipfile and, for encoded images, the other
# image loaders (`cargo bench` for the Rust core). Every benches/test_bench_*.py is collected.
bench: develop bench-peers
	$(PY) -m pytest benches -q --benchmark-only --benchmark-json=.bench/latest.json -p no:cacheprovider
	$(PY) benches/report.py .bench/latest.json

# The shard benchmarks alone (benches/test_bench_shards.py): 200 HDF5 shards against one file,
# batches, warm epochs and cold-cache epochs (drops the page cache: run as root).
bench-shards: develop
	$(PY) -m pytest benches/test_bench_shards.py -q --benchmark-only \
		--benchmark-json=.bench/shards.json -p no:cacheprovider
	$(PY) benches/report.py .bench/shards.json

# The object-storage benchmarks alone (benches/test_bench_remote.py): the gzip HDF5 file and
# the stored ZIP served by nginx on loopback, 20 ms added by a proxy, against h5py and zipfile
# over fsspec and the seed Dataset over fsspec; PACKREAD_BENCH_REMOTE_N sets the samples (512).
bench-remote: develop
	$(PY) -m pytest benches/test_bench_remote.py -q --benchmark-only \
		--benchmark-json=.bench/remote.json -p no:cacheprovider -s
	$(PY) benches/report.py .bench/remote.json

# The mixing benchmark (benches/bench_mix.py): MixDataset against its three sources read alone
# and against litdata's and mosaic's weighted mixtures of the same samples, 0 and 2 workers.
bench-mix: develop bench-peers
	$(PY) benches/bench_mix.py --rounds 15 --json .bench/mix.json

# The statistics overhead benchmark (benches/bench_stats.py): PackDataset with loader statistics
# on against packread.set_stats(False), alternated round by round, 0 and 2 workers.
bench-stats: develop
	$(PY) benches/bench_stats.py --rounds 15 --json .bench/stats.json

# packread.ray against Ray Data's image reader and an h5py Datasource on a local 2-CPU Ray
# cluster, and packread.dask against da.from_array(h5py) (benches/bench_ray.py): by each read's
# default read tasks, then the same tasks on both sides.
bench-ray: develop
	$(PY) benches/bench_ray.py --rounds 5 --json .bench/ray.json
	$(PY) benches/bench_ray.py --only jpeg --only hdf5 --rounds 5 --blocks 4 --json .bench/ray-blocks4.json

# The encoded-image benchmarks alone (benches/test_bench_images.py); PACKREAD_BENCH_IMAGES=200
# shrinks the workload (default 2,000 JPEGs).
bench-images: develop bench-peers
	$(PY) -m pytest benches/test_bench_images.py -q --benchmark-only \
		--benchmark-json=.bench/images.json -p no:cacheprovider
	$(PY) benches/report.py .bench/images.json

# The peer-loader benchmarks alone (benches/test_bench_loaders.py): PackDataset against FFCV,
# litdata, mosaicml-streaming, webdataset and DALI, uncompressed and zstd, one process and 2
# workers; PACKREAD_BENCH_LOADERS_N=256 shrinks the data set (default 2,000 samples).
bench-loaders: develop bench-peers
	$(PY) -m pytest benches/test_bench_loaders.py -q --benchmark-only \
		--benchmark-json=.bench/loaders.json -p no:cacheprovider
	$(PY) benches/report.py .bench/loaders.json

# The release wheel (zig's clang, glibc 2.17) against the development build (gcc) on the
# compiler-bound paths: gzip and blosc HDF5 chunks, JPEG and PNG decodes, alternated round by
# round (benches/bench_wheel.py).
bench-wheel: develop wheel
	$(PY) benches/bench_wheel.py dist/*.whl

# This checkout against the build of an earlier commit, BASE (a commit or tag; HEAD~1 by
# default), on the paths changes touch (benches/bench_builds.py), alternated round by round.
# BASE's extension is built once in a worktree under .bench/builds/<commit>, in a target
# directory of its own beside the usual one: cargo takes a build script compiled for one
# checkout as fresh for another whose build.rs is older (the same unit, by name).
BASE ?= HEAD~1
bench-builds: develop
	@base=$$(git rev-parse --short $(BASE)); dir=.bench/builds/$$base; \
	if [ ! -f $$dir/python/packread/_packread.abi3.so ]; then \
		rm -rf $$dir; git worktree prune; git worktree add -f --detach $$dir $$base; \
		(cd $$dir && CARGO_TARGET_DIR="$${CARGO_TARGET_DIR:-$(CURDIR)/target}/bench-builds" \
			maturin build --release --quiet --out dist); \
		$(PY) -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('packread/_packread.abi3.so', sys.argv[2])" \
			$$(ls $$dir/dist/packread-*.whl) $$dir/python; \
	fi; \
	$(PY) benches/bench_builds.py --build $$base=$$dir/python --build HEAD=python $(BENCH_BUILDS_ARGS)

# The JPEG decoder choice (benches/jpeg.rs): libjpeg-turbo against zune-jpeg, and packread's
# decode + crop, on the image benchmark's photos, written here first.
bench-jpeg: develop
	$(PY) -c "import sys; sys.path.insert(0, 'benches'); import image_workloads as w; \
		w.write_image_workload('.bench/jpegs', w.n_images(), log=lambda m: None)"
	PACKREAD_JPEG_DIR=.bench/jpegs cargo bench --bench jpeg

# The loaders the image and loader benchmarks compare against (requirements/bench-peers.txt), in
# .venv with requirements/lock.txt as constraints: pip refuses rather than move numpy or torch.
# Their system libraries come from apt: libturbojpeg (PyTurboJPEG; FFCV links it), OpenCV's
# headers and pkg-config (FFCV's C++ extension, built from its sdist). FFCV goes in without
# its dependencies: it asks for opencv-python, whose cv2 would clash with the headless one.
# mosaicml-streaming (the loader benchmark's peer) goes in without its dependencies too: its
# newest release pins numpy below 2.2, and it asks for cloud clients that local shards never
# use; what it imports is in requirements/bench-peers.txt.
# A peer that is missing is left out of the benchmarks with a warning saying why.
PEERS_STAMP := $(VENV)/.bench-peers
FFCV := ffcv==1.0.2
MOSAIC := mosaicml-streaming==0.13.0

bench-peers: $(PEERS_STAMP)

$(PEERS_STAMP): requirements/bench-peers.txt requirements/lock.txt $(STAMP)
	@pkg-config --exists opencv4 libturbojpeg 2>/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libturbojpeg0-dev libopencv-dev pkg-config; }
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/bench-peers.txt \
		-c requirements/lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $(FFCV) $(MOSAIC)
	touch $@

# Fuzzing (fuzz/, cargo-fuzz + libFuzzer). cargo-fuzz passes nightly-only rustc flags
# (-Zsanitizer=address); the machine's stable toolchain accepts them with RUSTC_BOOTSTRAP=1, so
# no nightly toolchain is needed. `make fuzz` runs every target for FUZZ_SECONDS from the
# committed seeds (fuzz/corpus) plus what earlier runs found (fuzz/work, not committed);
# `make fuzz-long` runs each for FUZZ_RUNS inputs, or FUZZ_MAX_SECONDS if that comes first (0:
# no time cap). Each target's result replaces its line in fuzz/logs/summary.txt (so two
# `make fuzz-long FUZZ_TARGETS=...` lanes can run side by side, one per core).
FUZZ_TARGETS := npy_header zip_archive tar_archive deflate shuffle fletcher32 lzf blosc blosc2 lz4 zstd bitshuffle pipeline planner hdf5_chunk image
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= 10000000
FUZZ_MAX_SECONDS ?= 0
# The C codecs (c-blosc2, lz4, zstd, zlib, libdeflate) are built by clang with AddressSanitizer
# and libFuzzer's coverage too, so that the fuzzer sees inside them and a read or write past a
# buffer there stops the run (gcc's ASan runtime cannot sit beside rustc's).
FUZZ_CC := CC=clang CFLAGS="-fsanitize=address -fsanitize=fuzzer-no-link -g"
FUZZ := $(FUZZ_CC) RUSTC_BOOTSTRAP=1 cargo fuzz
FUZZ_FLAGS := -rss_limit_mb=2048 -timeout=20 -print_final_stats=1

fuzz-tools:
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	@command -v clang >/dev/null || { apt-get update -qq && apt-get install -y -qq clang; }

fuzz-build: fuzz-tools
	$(FUZZ) build -O

fuzz-seeds: develop
	rm -rf fuzz/corpus && $(PY) fuzz/make_seeds.py

define run_fuzz
	mkdir -p fuzz/work fuzz/logs
	touch fuzz/logs/summary.txt
	for t in $(FUZZ_TARGETS); do \
		mkdir -p fuzz/work/$$t; \
		$(FUZZ) run -O $$t fuzz/work/$$t fuzz/corpus/$$t -- $(FUZZ_FLAGS) $(1) > fuzz/logs/$$t.log 2>&1 \
			|| { tail -40 fuzz/logs/$$t.log; echo "fuzz target $$t FAILED (fuzz/logs/$$t.log, fuzz/artifacts/$$t)"; exit 1; }; \
		line="$$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' fuzz/logs/$$t.log)"; echo "$$line"; \
		flock fuzz/logs/summary.txt sh -c 'grep -v "^$$0:" fuzz/logs/summary.txt > fuzz/logs/summary.new; echo "$$1" >> fuzz/logs/summary.new; sort fuzz/logs/summary.new > fuzz/logs/summary.txt; rm fuzz/logs/summary.new' "$$t" "$$line"; \
	done
endef

fuzz: fuzz-build
	$(call run_fuzz,-max_total_time=$(FUZZ_SECONDS))
	$(MAKE) --no-print-directory fuzz-files

fuzz-long: fuzz-build
	$(call run_fuzz,-runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_MAX_SECONDS))

# Whole files through the Python API (fuzz/files/fuzz_files.py): seeds written by h5py,
# hdf5plugin, PyTables, zipfile and numpy, mutated, read by packread and by those readers in
# worker processes, compared. A crash, hang, non-packread exception or differing data fails it
# (inputs saved in fuzz/artifacts/files with a replay command); its line joins
# fuzz/logs/summary.txt like the targets'. `make fuzz-files-long` runs FUZZ_FILES_RUNS inputs,
# or FUZZ_MAX_SECONDS if that comes first (0: no time cap).
FUZZ_FILES_SECONDS ?= 120
FUZZ_FILES_RUNS ?= 100000

define run_fuzz_files
	mkdir -p fuzz/logs
	touch fuzz/logs/summary.txt
	$(PY) fuzz/files/fuzz_files.py $(1) --out fuzz/artifacts/files > fuzz/logs/files.log 2>&1 \
		|| { sed -n '/^files: summary/,$$p' fuzz/logs/files.log | tail -80; echo "fuzz files FAILED (fuzz/logs/files.log, fuzz/artifacts/files)"; exit 1; }
	sed -n '/^files: summary/,/^  total/p' fuzz/logs/files.log
	line="files: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' fuzz/logs/files.log)"; echo "$$line"; \
	flock fuzz/logs/summary.txt sh -c 'grep -v "^$$0:" fuzz/logs/summary.txt > fuzz/logs/summary.new; echo "$$1" >> fuzz/logs/summary.new; sort fuzz/logs/summary.new > fuzz/logs/summary.txt; rm fuzz/logs/summary.new' "files" "$$line"
endef

fuzz-files: develop
	$(call run_fuzz_files,--seconds $(FUZZ_FILES_SECONDS))

fuzz-files-long: develop
	$(call run_fuzz_files,--runs $(FUZZ_FILES_RUNS) --seconds $(FUZZ_MAX_SECONDS))

# Miri (undefined-behaviour checker) over the core's pure-Rust modules: literal and NPY header
# parsing, dtypes, the planner and executor, the pure-Rust HDF5 filters, ZIP directory parsing.
# Needs rustup's nightly toolchain with the miri component (this project's machines carry one
# beside stable); where it is missing the target says so and fails instead of pretending.
MIRI_TESTS := literal:: npy_header:: dtype:: plan:: exec:: codec::hdf5_filters codec::transpose zip::
miri:
	@cargo +nightly miri --version >/dev/null 2>&1 || { echo "make miri: no nightly toolchain with miri here (rustup +nightly component add miri)"; exit 2; }
	MIRIFLAGS=-Zmiri-disable-isolation cargo +nightly miri test --lib --no-default-features -- $(MIRI_TESTS)

# Re-pins the whole dependency tree after changing requirements/dev.in.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements/dev.in
	.lock-venv/bin/pip freeze > requirements/lock.txt && rm -rf .lock-venv

clean:
	rm -rf $(VENV) $(COMPAT_VENV) target .bench dist site python/packread/*.so fuzz/target fuzz/work fuzz/logs
