#!/usr/bin/env bash
# Jobs with one plan on one daemon, with and without batch sharing, side by
# side: N concurrent batchd-client runs (each a job at full speed, same
# dataset, pipeline and seed) for N in JOBS; aggregate images/s delivered
# and the daemon's CPU per delivered image, and the ratio to one job.
#   bench/sharing.sh BUILD [epochs] [jobs...]
#   bench/sharing.sh build 2 1 2 4 8
# BATCHD_BENCH_DAEMON_FLAGS adds daemon flags (e.g. --shared-batch-bytes).
# The daemon has every core (--workers = nproc); the clients share them,
# as trainers on the same host would. Then 4 jobs with different seeds (no
# batch can be shared), without and with a read cache that holds the
# dataset, and the daemon's time per image by stage, which bounds what a
# cache of decoded images could save.
set -euo pipefail
BUILD=${1:?BUILD}
EPOCHS=${2:-2}
shift 2 || true
JOBS=("$@")
[ ${#JOBS[@]} -gt 0 ] || JOBS=(1 2 4 8)
DATA=${BATCHD_BENCH_DATA:-data/bench}
IMAGES=${BATCHD_BENCH_IMAGES:-1000}  # when DATA has to be generated
SIZE=${BATCHD_BENCH_SIZE:-224}
source "$(dirname "$0")/../testing/shell/bench_data.sh"
bench_require "$BUILD" server/batchd client/batchd-client tools/make_dataset
bench_dataset "$BUILD" "$DATA" "$IMAGES"
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
source "$(dirname "$0")/../testing/shell/batchd_daemon.sh"
TICKS=$(getconf CLK_TCK)
CORES=$(nproc)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# share(true|false) jobs [seeds: same|different] [read cache bytes]
#   -> "images/s daemon_ms_per_image"
measure() {
  local share=$1 jobs=$2 seeds=${3:-same} cache=${4:-0}
  batchd_start "$RUN" daemon "$BUILD/server/batchd" --dataset "bench=$DATA" \
    --workers "$CORES" --share-batches="$share" --read-cache-bytes "$cache" \
    ${BATCHD_BENCH_DAEMON_FLAGS:-}
  local daemon=$BATCHD_PID
  local before after start end images=0
  before=$(cpu_ticks "$daemon")
  start=$(date +%s.%N)
  local pids=()
  for j in $(seq 1 "$jobs"); do
    "$BUILD/client/batchd-client" --endpoint "127.0.0.1:$BATCHD_PORT" \
      --dataset bench --batch_size 64 --size "$SIZE" --prefetch 8 \
      --epochs "$EPOCHS" --job "sweep-$j" \
      --seed "$([ "$seeds" = same ] && echo 7 || echo "$j")" \
      > "$RUN/client-$j.txt" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  end=$(date +%s.%N)
  after=$(cpu_ticks "$daemon")
  "$BUILD/client/batchd-top" --endpoint "127.0.0.1:$BATCHD_PORT" --once \
    > "$RUN/top.txt" 2>&1 || true
  grep "sharing:" "$RUN/top.txt" | sed "s/^ */  $jobs jobs: /" >> "$RUN/sharing.txt" || true
  batchd_stop "$daemon"
  for j in $(seq 1 "$jobs"); do
    images=$((images + $(sed -n 's/^total: \([0-9]*\) images.*/\1/p' "$RUN/client-$j.txt")))
  done
  python3 -c 'import sys
images, start, end, before, after, ticks = sys.argv[1:]
images = int(images); seconds = float(end) - float(start)
rate = images / seconds
daemon_ms = (int(after) - int(before)) / int(ticks) / images * 1e3
assert rate > 0 and daemon_ms > 0, (rate, daemon_ms)
print(f"{rate:.0f} {daemon_ms:.3f}")' "$images" "$start" "$end" "$before" "$after" "$TICKS"
}

echo "dataset $DATA, ${SIZE}px, $EPOCHS epochs per job, daemon --workers $CORES on $CORES cores"
printf "| jobs | sharing | images/s (all jobs) | x one job | daemon ms/image | x one job |\n"
printf "|---|---|---|---|---|---|\n"
for share in false true; do
  base_rate="" base_ms=""
  for jobs in "${JOBS[@]}"; do
    read -r rate ms < <(measure "$share" "$jobs")
    [ -n "$base_rate" ] || { base_rate=$rate; base_ms=$ms; }
    python3 -c 'import sys
jobs, share, rate, ms, base_rate, base_ms = sys.argv[1:]
mode = "on" if share == "true" else "off"
print(f"| {jobs} | {mode} | {rate} | {float(rate) / float(base_rate):.2f}x | "
      f"{ms} | {float(ms) / float(base_ms):.2f}x |")' \
      "$jobs" "$share" "$rate" "$ms" "$base_rate" "$base_ms"
  done
done

echo
echo "how the requests were served (sharing on):"
cat "$RUN/sharing.txt"
echo
echo "4 jobs with different seeds (nothing to share), read cache off and on"
printf "| read cache | images/s (all jobs) | x no cache | daemon ms/image |\n"
printf "|---|---|---|---|\n"
DATA_BYTES=$(du -sb "$DATA" | cut -f1)
base_rate=""
for cache in 0 $((2 * DATA_BYTES)); do
  read -r rate ms < <(measure false 4 different "$cache")
  [ -n "$base_rate" ] || base_rate=$rate
  python3 -c 'import sys
cache, rate, ms, base = sys.argv[1:]
label = "off" if cache == "0" else f"{int(cache) / 1e6:.0f} MB"
print(f"| {label} | {rate} | {float(rate) / float(base):.2f}x | {ms} |")' \
    "$cache" "$rate" "$ms" "$base_rate"
done
echo
echo "the daemon's time per image by stage (last run, batchd top):"
grep -E "ms/img|sharing:" "$RUN/top.txt" || cat "$RUN/top.txt"
