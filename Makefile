# Thin wrapper: installs Debian packages, builds with CMake, runs things.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
DEB_PACKAGES := cmake ninja-build g++ pkg-config \
  libgrpc++-dev protobuf-compiler-grpc grpc-proto libprotobuf-dev protobuf-compiler \
  libabsl-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev libgtest-dev libgmock-dev \
  libbenchmark-dev libcpp-httplib-dev libyuv-dev \
  python3-dev pybind11-dev python3-pytest python3-numpy python3-torch \
  python3-torchvision python3-pil python3-prometheus-client util-linux openssl

.PHONY: all setup build test demo deploy-test clean

all: build

# Installs whatever Debian packages are missing; prints the command when not root.
setup:
	@./scripts/install_deps.sh $(DEB_PACKAGES)

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: setup $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD_DIR)

# The container path, really run: images on a debootstrapped Debian 12 base,
# the docker-compose stack, its checks (scripts/deploy_test.sh).
deploy-test:
	./scripts/deploy_test.sh

clean:
	rm -rf $(BUILD_DIR)
