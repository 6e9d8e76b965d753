#!/usr/bin/env bash
# Runs every fuzz target for SECONDS under ASan + UBSan and prints, per
# target, the executions, execs per second and coverage reached:
#   fuzz/run_fuzzers.sh BUILD_DIR [SECONDS]          (default 60)
# BUILD_DIR is a BATCHD_FUZZ=ON build (make fuzz makes one). Each target
# starts from its seeds (fuzz/make_seeds.sh) and kept regressions
# (fuzz/regressions/); new corpus entries go to BUILD_DIR/fuzz/corpus/.
# A crash, leak, timeout or out-of-memory input fails the run; libFuzzer
# saves it in BUILD_DIR/fuzz/artifacts/ to be fixed and then kept in
# fuzz/regressions/<target>/.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [SECONDS]}
seconds=${2:-60}
src=$(cd "$(dirname "$0")/.." && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/tests/sanitizers/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$src/fuzz/make_seeds.sh" "$build" "$build/fuzz/seeds" 2>/dev/null
mkdir -p "$build/fuzz/artifacts"
# One target per core at a time: the targets run side by side.
jobs=$(nproc)
run_one() {
  local target=$1 corpus=$build/fuzz/corpus/$1 log=$build/fuzz/$1.log
  mkdir -p "$corpus"
  "$build/fuzz/fuzz_$target" -max_total_time="$seconds" \
    -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$build/fuzz/artifacts/$target-" \
    "$corpus" "$build/fuzz/seeds/$target" "$src/fuzz/regressions/$target" \
    > "$log" 2>&1
}
targets=(decode dataset_config plan receive tar_index)
pids=() status=0
for target in "${targets[@]}"; do
  echo "== fuzz_$target: ${seconds}s"
  run_one "$target" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done

summary=()
for target in "${targets[@]}"; do
  log=$build/fuzz/$target.log
  if grep -qE '^==[0-9]+==ERROR|^SUMMARY: |Test unit written|-- out-of-memory|ALARM: working on the last Unit' "$log"; then
    status=1
    tail -40 "$log"
    echo "fuzz_$target FAILED: see $log and $build/fuzz/artifacts/"
  fi
  corpus=$build/fuzz/corpus/$target
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || echo 0)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || echo 0)
  summary+=("$(printf '%-20s %4ss %10s execs %7s/s  cov %6s  ft %6s  corpus %5s' \
    "fuzz_$target" "$seconds" "$runs" "$rate" "$cov" "$ft" "$(ls "$corpus" | wc -l)")")
done
printf '%s\n' "${summary[@]}"
exit $status
