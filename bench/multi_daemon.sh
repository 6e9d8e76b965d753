#!/usr/bin/env bash
# Scale-out figures, side by side in one run (BENCHMARKS.md, "Many daemons"):
#  1. one daemon vs two, each pinned to its own core with one worker, the
#     client pinned to core 1; runs alternate, REPEATS times; prints the
#     median images/s of each and the ratio. Both move batches as bytes
#     over TCP: with one loopback endpoint the client would otherwise use
#     shared memory, which two daemons (on two hosts, as scale-out is meant)
#     cannot, and the ratio would compare transports, not daemons;
#  2. a trainer with a 150 ms step over two daemons, one killed with -9
#     mid-run: the longest wait for a batch, next to the same run without
#     the kill.
#   bench/multi_daemon.sh [build-dir]
# BATCHD_BENCH_CLIENT_FLAGS adds client flags to every run (e.g.
# --next_epoch_prefetch=false for the figure without read-ahead).
set -euo pipefail
BUILD=${1:-build}
DATA=${BATCHD_BENCH_DATA:-data/demo}
REPEATS=${BATCHD_BENCH_REPEATS:-3}
EPOCHS=${BATCHD_BENCH_EPOCHS:-10}
read -r -a CLIENT_FLAGS <<< "${BATCHD_BENCH_CLIENT_FLAGS:-}"
if [ ! -f "$DATA/.complete" ]; then
  "$BUILD/tools/make_dataset" --out "$DATA" --images 1024 --classes 10 --seed 1
  touch "$DATA/.complete"
fi
RUN=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$RUN"; }
trap cleanup EXIT

source "$(dirname "$0")/../testing/shell/batchd_daemon.sh"
# start_daemon CORE NAME: a one-worker daemon pinned to CORE; sets $PORT.
start_daemon() {
  BATCHD_PIN=(taskset -c "$1")
  batchd_start "$RUN" "$2" "$BUILD/server/batchd" --dataset "bench=$DATA" \
    --workers 1
  PIDS+=("$BATCHD_PID")
  LAST_PID=$BATCHD_PID
  PORT=$BATCHD_PORT
}
stop_all() { for p in "${PIDS[@]}"; do batchd_stop "$p"; done; PIDS=(); }
client() {  # client ENDPOINTS EXTRA...
  local endpoints=$1; shift
  taskset -c 1 "$BUILD/client/batchd-client" --endpoint "$endpoints" --dataset bench \
    --batch_size 64 --size 224 --prefetch 8 ${CLIENT_FLAGS[@]+"${CLIENT_FLAGS[@]}"} "$@"
}
rate() { sed -n 's/^total: .* \([0-9.]*\) images\/s,.*/\1/p' "$1"; }

echo "dataset: $DATA ($(batchd_count_images "$DATA") images), batch 64, 224x224, one worker per daemon"
ones=(); twos=()
for r in $(seq "$REPEATS"); do
  start_daemon 0 a; A=$PORT
  client "127.0.0.1:$A" --epochs "$EPOCHS" --shm=false > "$RUN/one.txt"; stop_all
  ones+=("$(rate "$RUN/one.txt")")
  start_daemon 0 a; A=$PORT; start_daemon 1 b; B=$PORT
  client "127.0.0.1:$A,127.0.0.1:$B" --epochs "$EPOCHS" > "$RUN/two.txt"; stop_all
  twos+=("$(rate "$RUN/two.txt")")
  echo "repeat $r: one daemon ${ones[-1]} images/s, two daemons ${twos[-1]} images/s"
done
python3 - "${ones[*]}" "${twos[*]}" <<'PY'
import statistics, sys
one = statistics.median(float(x) for x in sys.argv[1].split())
two = statistics.median(float(x) for x in sys.argv[2].split())
print(f"scale-out: one daemon {one:.0f} images/s, two {two:.0f} images/s (medians): {two / one:.2f}x")
PY

# Failover: 150 ms steps over two daemons (3 epochs, ~7 s); kill -9 one
# after 3 s, mid-epoch.
for kill in no yes; do
  start_daemon 0 a; A=$PORT; APID=$LAST_PID; start_daemon 1 b; B=$PORT
  client "127.0.0.1:$A,127.0.0.1:$B" --epochs 3 --step_ms 150 --verify > "$RUN/fail.txt" &
  CLIENT=$!
  if [ "$kill" = yes ]; then sleep 3; kill -9 "$APID"; fi
  wait "$CLIENT"
  stop_all
  wait_s=$(sed -n 's/.*longest wait \([0-9.]*\) s.*/\1/p' "$RUN/fail.txt")
  verify=$(grep -c "verify: epoch [0-9]* ok" "$RUN/fail.txt" || true)
  rereq=$(sed -n 's/^daemons: \([0-9]*\) batches re-requested.*/\1/p' "$RUN/fail.txt")
  echo "failover (kill -9 of one of two: $kill): longest wait ${wait_s} s, re-requested ${rereq:-0}, exactly-once verified: $([ "$verify" = 3 ] && echo yes || echo NO)"
done
