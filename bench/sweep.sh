#!/usr/bin/env bash
# A sweep as people run one: N ResNet-18 trainers (examples/train_resnet.py,
# batchd only) with the same dataset, pipeline and seed, started together
# against one daemon; the time until all N have finished, with batch
# sharing off and on, side by side.
#   bench/sweep.sh BUILD [trainers] [steps]
#   bench/sweep.sh build 4 40
# The trainers run on the CPU with one torch thread each, small images
# (--image-size 64) and the daemon's workers on every core: the trainers
# and the daemon share the cores, as on a one-host sweep.
set -euo pipefail
BUILD=${1:?BUILD}
TRAINERS=${2:-4}
STEPS=${3:-40}
DATA=${BATCHD_BENCH_DATA:-data/bench}
IMAGES=${BATCHD_BENCH_IMAGES:-1000}  # when DATA has to be generated
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/../testing/shell/bench_data.sh"
bench_require "$BUILD" server/batchd tools/make_dataset
bench_dataset "$BUILD" "$DATA" "$IMAGES"
RUN=$(mktemp -d)
trap '[ -n "${BATCHD_BENCH_KEEP:-}" ] || rm -rf "$RUN"' EXIT
source "$REPO/testing/shell/batchd_daemon.sh"
TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# sweep(true|false) -> "seconds daemon_cpu_seconds"
sweep() {
  local share=$1
  batchd_start "$RUN" daemon "$BUILD/server/batchd" --dataset "bench=$DATA" \
    --workers "$(nproc)" --share-batches="$share"
  local daemon=$BATCHD_PID before start end pids=()
  before=$(cpu_ticks "$daemon")
  start=$(date +%s.%N)
  for t in $(seq 1 "$TRAINERS"); do
    /usr/bin/python3 "$REPO/examples/train_resnet.py" --data "$DATA" \
      --build "$BUILD" --endpoint "127.0.0.1:$BATCHD_PORT" --dataset bench \
      --loaders batchd --image-size 64 --batch-size 32 --steps "$STEPS" \
      --threads 1 > "$RUN/trainer-$share-$t.txt" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  end=$(date +%s.%N)
  local after
  after=$(cpu_ticks "$daemon")
  batchd_stop "$daemon"
  if [ "$failed" = 1 ]; then
    echo "a trainer failed (sharing $share):" >&2
    tail -5 "$RUN"/trainer-"$share"-*.txt >&2
    return 1
  fi
  python3 -c 'import sys
start, end, before, after, ticks = sys.argv[1:]
print(f"{float(end) - float(start):.1f} {(int(after) - int(before)) / int(ticks):.1f}")' \
    "$start" "$end" "$before" "$after" "$TICKS"
}

echo "$TRAINERS trainers x $STEPS steps (batch 32, 64 px, 1 torch thread each), dataset $DATA, $(nproc) cores"
printf "| sharing | all trainers done (s) | daemon CPU (s) | waiting for data (per trainer) |\n"
printf "|---|---|---|---|\n"
declare -A seconds
for share in false true; do
  read -r wall cpu < <(sweep "$share")
  seconds[$share]=$wall
  waits=$(sed -n 's/^batchd[^:]*: step.*waiting for data \([0-9.]*%\).*/\1/p' \
          "$RUN"/trainer-"$share"-*.txt | paste -sd' ')
  printf "| %s | %s | %s | %s |\n" "$([ "$share" = true ] && echo on || echo off)" \
    "$wall" "$cpu" "$waits"
done
python3 -c 'import sys
off, on = map(float, sys.argv[1:])
print(f"sweep finished {off / on:.2f}x sooner with sharing")' \
  "${seconds[false]}" "${seconds[true]}"
