#!/usr/bin/env bash
# Device checks for the client's GPU path, for a fresh machine with a CUDA
# device and the CUDA toolkit (no gRPC, Protobuf or Abseil needed).
#
# Builds client/cuda standalone (library, tests, benchmark), runs the tests
# (GPU tests included) and the benchmark, and writes everything to one
# results file. Takes well under 8 minutes on an H100/H200 (build ~1-2 min,
# tests ~10 s, benchmark ~30 s).
#
#   tests/gpu/run_device_checks.sh              # build + run
#   tests/gpu/run_device_checks.sh --build-only # just the build
#
# Environment:
#   RESULTS   results file (default: $OUT/gpu_checks.txt when $OUT is set,
#             else $BUILD_DIR/gpu_checks.txt)
#   BUILD_DIR build directory (default /tmp/batchd-cuda-checks)
#   JOBS      parallel build jobs (default: number of CPUs)
#
# Exit status: 0 when the build and every test passed (tests skip without a
# device: then the results say "no CUDA device"), 1 otherwise.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-/tmp/batchd-cuda-checks}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if [[ -n "${RESULTS:-}" ]]; then
  :
elif [[ -n "${OUT:-}" ]]; then
  RESULTS="$OUT/gpu_checks.txt"
else
  RESULTS="$BUILD_DIR/gpu_checks.txt"
fi
BUILD_ONLY=0
[[ "${1:-}" == "--build-only" ]] && BUILD_ONLY=1

mkdir -p "$(dirname "$RESULTS")"
: > "$RESULTS"
log() { echo "$*" | tee -a "$RESULTS"; }
run() {  # run LIMIT_SECONDS CMD...: output to the results file, tee'd
  local limit=$1
  shift
  log "\$ $*"
  timeout "$limit" "$@" 2>&1 | tee -a "$RESULTS"
  return "${PIPESTATUS[0]}"
}

status=0
log "== batchd GPU device checks, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
log "repository: $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"

# The toolkit is often off PATH.
NVCC=$(command -v nvcc || true)
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
log "nvcc: ${NVCC:-not found (CPU-only build)}"
[[ -n "$NVCC" ]] && "$NVCC" --version | tail -2 | tee -a "$RESULTS"

HAVE_GPU=0
ARCH_FLAGS=()
if command -v nvidia-smi > /dev/null 2>&1 &&
   nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version \
     --format=csv,noheader > /tmp/batchd-gpu-list.txt 2>/dev/null; then
  HAVE_GPU=1
  log "GPUs:"
  tee -a "$RESULTS" < /tmp/batchd-gpu-list.txt
  # Compile for the local GPU only: the shortest build.
  cap=$(head -1 /tmp/batchd-gpu-list.txt | cut -d, -f2 | tr -d ' .')
  [[ "$cap" =~ ^[0-9]+$ ]] && ARCH_FLAGS=(-DCMAKE_CUDA_ARCHITECTURES="$cap")
else
  log "no CUDA device (nvidia-smi absent or failing): tests will skip"
fi

GENERATOR=()
command -v ninja > /dev/null 2>&1 && GENERATOR=(-G Ninja)
CUDA_FLAGS=()
[[ -n "$NVCC" ]] && CUDA_FLAGS=(-DCMAKE_CUDA_COMPILER="$NVCC")

log ""
log "== build (standalone client/cuda)"
start=$(date +%s)
if ! run 300 cmake -S "$ROOT/client/cuda" -B "$BUILD_DIR" "${GENERATOR[@]}" \
       -DCMAKE_BUILD_TYPE=Release "${CUDA_FLAGS[@]}" "${ARCH_FLAGS[@]}"; then
  log "RESULT: configure FAILED"
  exit 1
fi
if ! run 420 cmake --build "$BUILD_DIR" -j "$JOBS"; then
  log "RESULT: build FAILED"
  exit 1
fi
log "build took $(( $(date +%s) - start )) s"
if (( BUILD_ONLY )); then
  log "RESULT: build OK (--build-only)"
  exit 0
fi

log ""
log "== tests"
if ! (cd "$BUILD_DIR" && run 300 ctest --output-on-failure --timeout 240); then
  status=1
fi
# On a machine with a device, the GPU tests must have run, not skipped.
if (( HAVE_GPU )); then
  log "\$ batchd_cuda_gpu_test (verbose)"
  timeout 240 "$BUILD_DIR/batchd_cuda_gpu_test" 2>&1 | tee -a "$RESULTS"
  rc=${PIPESTATUS[0]}
  if (( rc == 77 )); then
    log "ERROR: a GPU is listed but the GPU tests skipped (no usable device?)"
    status=1
  elif (( rc != 0 )); then
    status=1
  fi
fi

log ""
log "== benchmark"
run 300 "$BUILD_DIR/batchd_cuda_bench" || status=1

log ""
if (( status == 0 )); then
  log "RESULT: OK"
else
  log "RESULT: FAILED"
fi
log "results written to $RESULTS"
exit "$status"
