# The two commands a user needs are `make demo` and `make test`; everything else is for developers.
# Each target installs what it needs first (tools/bootstrap.sh is idempotent).

SHELL := /bin/bash
.DEFAULT_GOAL := build
CTEST_ARGS ?=
# Tests run two at a time: many wait on child processes and sockets (on two cores the suite took
# 509-575 s so, against about 860 s serially).
CTEST_PARALLEL ?= 2
# ccache hits across clones in other folders too (CI builds a fresh clone): paths under the
# checkout are hashed relative to it.
export CCACHE_DIR ?= $(HOME)/.cache/ccache
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1
export CCACHE_MAXSIZE ?= 5G

.PHONY: bootstrap build build-demo build-lint build-asan build-fuzz build-cuda demo test test-default \
        test-sanitizers test-asan test-fuzz test-gpu test-slow \
        cuda format format-check lint bench bench-s3 bench-jobs bench-registry bench-train bench-tokenizer \
        bench-serve bench-gateway clean

bootstrap:
	@tools/bootstrap.sh

build/build.ninja:
	cmake --preset default >/dev/null

build: bootstrap build/build.ninja
	cmake --build --preset default

# The default build with SOVAI_WERROR=ON (-Werror), for `make lint`: the tree must compile without
# a warning, while a user's `make build` on a newer compiler with new warnings still succeeds.
build-lint/build.ninja:
	cmake --preset lint >/dev/null

build-lint: bootstrap build-lint/build.ninja
	cmake --build --preset lint

# What `make demo` runs and nothing else: the daemon and CLI (`sovai`, which links the web panel's
# assets, so building it builds the panel) and the ML engine: 277 of the 515 build steps, none of
# the tests and benchmarks (`ninja -C build -n sovai sovai-engine`). `make test` builds everything.
build-demo: bootstrap build/build.ninja
	cmake --build --preset default --target sovai sovai-engine

build-asan/build.ninja:
	cmake --preset asan >/dev/null

build-asan: bootstrap build-asan/build.ninja
	cmake --build --preset asan

build-fuzz/build.ninja:
	cmake --preset fuzz >/dev/null

build-fuzz: bootstrap build-fuzz/build.ninja
	cmake --build --preset fuzz

build-cuda/build.ninja:
	cmake --preset cuda >/dev/null

build-cuda: bootstrap build-cuda/build.ninja
	cmake --build --preset cuda

cuda: build-cuda

# The main job on the embedded defaults.
demo: build-demo
	@tools/demo.sh

# The whole default suite in one build: every label but `slow` and `gpu`. That build compiles
# the CUDA backend wherever nvcc is (no GPU needed); its `gpu` tests run with `make test-gpu`.
test: test-default

test-default: build
	@grep -q '^SOVAI_CUDA:BOOL=ON' build/CMakeCache.txt || \
	  echo "test: SOVAI_CUDA is off in build/ (no working nvcc when it was configured, or turned off): the CUDA backend was NOT compiled"
	ctest --test-dir build --output-on-failure --parallel $(CTEST_PARALLEL) -LE 'slow|gpu' $(CTEST_ARGS)

# The sanitizer builds: the unit, integration and fuzz (corpus replay) labels under ASan+UBSan,
# then the libFuzzer smoke runs (clang, also under ASan+UBSan). Two more builds of the tree
# (about an hour cold on two cores), so they are not part of `make test`.
test-sanitizers: test-asan test-fuzz

test-asan: build-asan
	ctest --test-dir build-asan --output-on-failure -L 'unit|integration|fuzz' $(CTEST_ARGS)

test-fuzz: build-fuzz
	ctest --test-dir build-fuzz --output-on-failure -L fuzz $(CTEST_ARGS)

# The CUDA tests; each exits 77 (reported skipped) where there is no device.
test-gpu: build
	ctest --test-dir build --output-on-failure -L gpu $(CTEST_ARGS)

test-slow: build
	ctest --test-dir build --output-on-failure -L slow $(CTEST_ARGS)

format:
	@git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i

format-check:
	@git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format --dry-run --Werror

lint: build-lint format-check
	@tools/lint.sh build-lint

bench: build
	@bench/http/run.sh

bench-s3: build
	@bench/s3/run.sh

bench-jobs: build
	@bench/jobs/run.sh

bench-registry: build
	@python3 bench/registry/run.py

bench-tokenizer: build
	@bench/tokenizer/run.sh

# The gateway against a direct call to the replica, and its response-cache hits, in one run.
bench-gateway: build
	@build/bench/gateway/gateway_bench

bench-train: build
	@/usr/bin/python3 bench/train/run.py

# Builds only what it needs (sovai-engine in build-bench, llama-server under ~/.cache/sovai-bench).
bench-serve: bootstrap
	@/usr/bin/python3 bench/serve/run.py

clean:
	rm -rf build build-asan build-fuzz build-cuda
