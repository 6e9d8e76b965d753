# Thin wrapper: installs Debian packages, builds with CMake, runs things.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
DEB_PACKAGES := cmake ninja-build g++ pkg-config \
  libgrpc++-dev protobuf-compiler-grpc grpc-proto libprotobuf-dev protobuf-compiler \
  libabsl-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev libwebp-dev libgtest-dev libgmock-dev \
  libbenchmark-dev libcpp-httplib-dev libyuv-dev \
  python3-dev pybind11-dev python3-pytest python3-numpy python3-torch \
  python3-torchvision python3-pil python3-skimage python3-prometheus-client python3-matplotlib \
  python3-yaml prometheus python3-venv python3-pip python3-setuptools python3-wheel \
  util-linux openssl libcurl4-openssl-dev curl nginx \
  clang libclang-rt-14-dev \
  nodejs chromium $(if $(shell command -v npm),,npm)
# nodejs and npm fetch uPlot (the live page) and puppeteer-core (its browser
# test) from server/web/package-lock.json, and s3rver (the remote-dataset
# tests' S3) from testing/s3rver/package-lock.json; nginx serves those
# tests' HTTP(S) shards; Debian's npm is asked for only
# when no npm is installed (a nodejs from elsewhere may bring its own).

# What `make demo` runs (the daemon, the command-line client, batchd-top
# and the dataset tools) and the packages it builds them from: a subset of
# DEB_PACKAGES without the test suite's servers, browser and Python stack.
# GoogleTest stays: the configure step declares every target.
DEMO_PACKAGES := cmake ninja-build g++ pkg-config \
  libgrpc++-dev protobuf-compiler-grpc grpc-proto libprotobuf-dev protobuf-compiler \
  libabsl-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev libwebp-dev libgtest-dev libgmock-dev \
  libcpp-httplib-dev libcurl4-openssl-dev \
  nodejs $(if $(shell command -v npm),,npm)
DEMO_TARGETS := batchd batchd_client_cli batchd_top make_dataset batchd_prep

.PHONY: all setup build configure test test-asan test-tsan fuzz soak chaos demo deploy-test clean

all: build

# Installs whatever Debian packages are missing; prints the command when not root.
setup:
	@./scripts/install_deps.sh $(DEB_PACKAGES)

# Configured every time (seconds when nothing changed), so that a build
# directory first made by `make demo`, with fewer packages installed, finds
# what `make setup` has installed since (the Python module, the browser
# tests).
configure:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: setup
	$(MAKE) configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The C++ suites, end-to-end tests with real daemons included, built by
# clang with AddressSanitizer and UndefinedBehaviorSanitizer (any finding
# fails the test) and with -Wthread-safety -Werror=thread-safety, which
# checks every ABSL_GUARDED_BY and lock annotation. The Python, bench and
# deploy tests run in `make test`.
ASAN_BUILD_DIR ?= build-asan
SANITIZER_ENV := \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The clang checking builds (test-asan, fuzz, test-tsan): optimised enough
# to run the e2e tests, line tables for the reports, no CUDA, no Python
# module or benchmarks (their tests run in `make test`).
CHECK_CMAKE_FLAGS := -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CUDA_COMPILER=NOTFOUND -DBATCHD_PYTHON=OFF -DBATCHD_BENCH=OFF

$(ASAN_BUILD_DIR)/build.ninja:
	cmake -S . -B $(ASAN_BUILD_DIR) $(CHECK_CMAKE_FLAGS) \
	  -DBATCHD_THREAD_SAFETY=ON -DBATCHD_SANITIZE=address,undefined \
	  -DBATCHD_FUZZ=ON

test-asan: setup $(ASAN_BUILD_DIR)/build.ninja
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && $(SANITIZER_ENV) \
	  ctest --output-on-failure -j $(JOBS) -LE 'deploy|gpu'

# Every fuzz target (fuzz/) for FUZZ_SECONDS each under ASan + UBSan, in the
# same build as test-asan; prints executions and coverage per target.
FUZZ_SECONDS ?= 60
fuzz: setup $(ASAN_BUILD_DIR)/build.ninja
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	$(SANITIZER_ENV) fuzz/run_fuzzers.sh $(ASAN_BUILD_DIR) $(FUZZ_SECONDS)

# The concurrency-heavy suites under ThreadSanitizer: the worker pool, the
# buffer pool, the caches, the stream session (reactions, pipeline
# threads and the broker call it at once), the client's loader and
# scheduler, and end-to-end tests with
# real daemons (themselves TSan builds: the data service's streams, drain,
# restarts), one at a time (a TSan daemon is 5-15x slower). Debian's
# Abseil and gRPC are not built with TSan: tests/sanitizers/ says how
# their synchronisation is made visible or set aside.
TSAN_BUILD_DIR ?= build-tsan
TSAN_TESTS := worker_pool_test batch_buffer_pool_test loader_test \
  loader_progress_test \
  loader_errors_test shared_batches_test read_cache_test decoded_cache_test \
  lru_cache_test shard_cache_test shard_cache_forecast_test shard_demand_test \
  range_prefetch_test remote_shards_test \
  pipeline_prefetch_test \
  request_scheduler_test shared_ring_test device_loader_test stream_session_test \
  stream_errors_e2e_test determinism_e2e_test lifecycle_e2e_test
# ignore_noninstrumented_modules: the libc calls that Debian's gRPC,
# Abseil, Protobuf and libstdc++ make (memcpy, epoll_wait, ...) are not
# checked, as their own loads and stores are not: TSan sees none of the
# synchronisation inside them and would report races between their own
# threads. Every access by batchd's code is still checked.
TSAN_ENV := TSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/tsan.supp:ignore_noninstrumented_modules=1:halt_on_error=1:second_deadlock_stack=1
empty :=
space := $(empty) $(empty)

$(TSAN_BUILD_DIR)/build.ninja:
	cmake -S . -B $(TSAN_BUILD_DIR) $(CHECK_CMAKE_FLAGS) -DBATCHD_SANITIZE=thread

test-tsan: setup $(TSAN_BUILD_DIR)/build.ninja
	cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target $(TSAN_TESTS)
	cd $(TSAN_BUILD_DIR) && $(TSAN_ENV) \
	  ctest --output-on-failure -j 1 -R '^($(subst $(space),|,$(strip $(TSAN_TESTS))))$$'

# Several daemons and clients under random faults for DURATION seconds,
# every delivered batch checked against a clean daemon (tests/soak/soak.cc).
DURATION ?= 180
soak: build
	$(BUILD_DIR)/tests/soak/batchd-soak --duration_s=$(DURATION)

# Three daemons in their own network namespaces, joined by veth pairs to
# the clients' namespace, under partitions, bandwidth caps (tc tbf),
# latency, resets and stalls (a userspace proxy) and kill -9 / SIGSTOP
# every 20 s, every batch checked by the soak's oracle (tests/chaos/).
# 10 minutes unless DURATION is given; needs root and iproute2 (prints
# "chaos: SKIPPED: ..." and succeeds otherwise).
CHAOS_DURATION ?= 600
chaos: build
	$(BUILD_DIR)/tests/chaos/batchd-chaos --duration_s=$(if $(filter command line environment,$(origin DURATION)),$(DURATION),$(CHAOS_DURATION))

# Installs and builds only what the demo runs; `make test` builds the rest.
demo:
	@./scripts/install_deps.sh $(DEMO_PACKAGES)
	$(MAKE) configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(DEMO_TARGETS)
	./scripts/demo.sh $(BUILD_DIR)

# The container path, really run: images on a debootstrapped Debian 12 base,
# the docker-compose stack, its checks (scripts/deploy_test.sh).
deploy-test:
	./scripts/deploy_test.sh

clean:
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR) $(TSAN_BUILD_DIR)
