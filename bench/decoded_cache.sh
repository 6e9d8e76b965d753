#!/usr/bin/env bash
# Jobs that differ in seed (so cannot share batches) on one daemon, with the
# capped pipeline (Pipeline.decoded_max_side) and the decoded-image cache
# (--decoded-cache-bytes), side by side:
#   (a) default pipeline, no cache;
#   (b) decoded_max_side CAP, no cache;
#   (c') decoded_max_side CAP, the same cache, cold: the jobs' first epoch
#       decodes each image once between them;
#   (c) decoded_max_side CAP, a cache that holds every capped image, warmed
#       by one untimed epoch of one job first.
# JOBS concurrent batchd-client runs (seeds 1..JOBS, EPOCHS epochs each);
# aggregate images/s delivered, per core, the daemon's CPU per image, and
# the ratios to (a). Then the per-pixel difference of the capped pipeline
# from the default one (batchd-capped-diff).
#   bench/decoded_cache.sh BUILD [epochs] [rounds]
#   bench/decoded_cache.sh build 1 2
# Env: BATCHD_BENCH_DATA (default data/bench-2000), BATCHD_BENCH_IMAGES
# (2000, when DATA has to be generated), BATCHD_BENCH_SIZE (224),
# BATCHD_BENCH_CAP (320), BATCHD_BENCH_JOBS (4), BATCHD_BENCH_DAEMON_FLAGS.
# Rounds repeat (a), (b), (c) in turn, so that a noisy machine hits all
# three alike.
set -euo pipefail
BUILD=${1:?BUILD}
EPOCHS=${2:-1}
ROUNDS=${3:-1}
DATA=${BATCHD_BENCH_DATA:-data/bench-2000}
IMAGES=${BATCHD_BENCH_IMAGES:-2000}
SIZE=${BATCHD_BENCH_SIZE:-224}
CAP=${BATCHD_BENCH_CAP:-320}
JOBS=${BATCHD_BENCH_JOBS:-4}
source "$(dirname "$0")/../testing/shell/bench_data.sh"
bench_require "$BUILD" server/batchd client/batchd-client tools/make_dataset bench/batchd-capped-diff
bench_dataset "$BUILD" "$DATA" "$IMAGES"
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
source "$(dirname "$0")/../testing/shell/batchd_daemon.sh"
TICKS=$(getconf CLK_TCK)
CORES=$(nproc)
COUNT=$(find "$DATA" -name '*.jpg' | wc -l)
# Every capped image at most CAP x CAP x 3 bytes, plus the entry overhead.
CACHE_BYTES=$((COUNT * (CAP * CAP * 3 + 512)))
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

client() {  # job seed epochs cap
  "$BUILD/client/batchd-client" --endpoint "127.0.0.1:$BATCHD_PORT" \
    --dataset bench --batch_size 64 --size "$SIZE" --prefetch 8 \
    --epochs "$3" --job "sweep-$1" --seed "$2" --decoded_max_side "$4"
}

# cap cache_bytes warm(yes|no) -> "images/s daemon_ms_per_image hits misses"
measure() {
  local cap=$1 cache=$2 warm=$3
  batchd_start "$RUN" daemon "$BUILD/server/batchd" --dataset "bench=$DATA" \
    --workers "$CORES" --decoded-cache-bytes "$cache" \
    --metrics-port 0 --metrics-port-file "$RUN/metrics.port" \
    ${BATCHD_BENCH_DAEMON_FLAGS:-}
  local daemon=$BATCHD_PID
  if [ "$warm" = yes ]; then
    # Warm: one epoch of a job with yet another seed, untimed.
    client warm 1000 1 "$cap" > "$RUN/warm.txt"
  fi
  local before after start end images=0
  before=$(cpu_ticks "$daemon")
  start=$(date +%s.%N)
  local pids=()
  for j in $(seq 1 "$JOBS"); do
    client "$j" "$j" "$EPOCHS" "$cap" > "$RUN/client-$j.txt" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  end=$(date +%s.%N)
  after=$(cpu_ticks "$daemon")
  curl -s "http://127.0.0.1:$(cat "$RUN/metrics.port")/metrics" \
    > "$RUN/metrics.txt" 2>/dev/null || true
  batchd_stop "$daemon"
  for j in $(seq 1 "$JOBS"); do
    images=$((images + $(sed -n 's/^total: \([0-9]*\) images.*/\1/p' "$RUN/client-$j.txt")))
  done
  local hits misses
  hits=$(awk '/^batchd_decoded_cache_hits_total/ {print $2}' "$RUN/metrics.txt")
  misses=$(awk '/^batchd_decoded_cache_misses_total/ {print $2}' "$RUN/metrics.txt")
  python3 -c 'import sys
images, start, end, before, after, ticks = sys.argv[1:7]
images = int(images); seconds = float(end) - float(start)
rate = images / seconds
daemon_ms = (int(after) - int(before)) / int(ticks) / images * 1e3
assert rate > 0 and daemon_ms >= 0, (rate, daemon_ms)
print(f"{rate:.0f} {daemon_ms:.3f} {sys.argv[7]} {sys.argv[8]}")' \
    "$images" "$start" "$end" "$before" "$after" "$TICKS" \
    "${hits:--}" "${misses:--}"
}

echo "dataset $DATA ($COUNT images), ${SIZE}px, $JOBS jobs (seeds 1..$JOBS)," \
  "$EPOCHS epoch(s) each, daemon --workers $CORES on $CORES cores," \
  "decoded_max_side $CAP, cache $((CACHE_BYTES / 1000000)) MB"
printf "| round | pipeline | images/s (all jobs) | per core | x (a) | daemon ms/image | x (a) | cache hits / misses |\n"
printf "|---|---|---|---|---|---|---|---|\n"
for round in $(seq 1 "$ROUNDS"); do
  base_rate="" base_ms=""
  for config in a b cold c; do
    warm=no
    case $config in
      a) cap=0; cache=0; label="(a) default" ;;
      b) cap=$CAP; cache=0; label="(b) decoded_max_side $CAP" ;;
      cold) cap=$CAP; cache=$CACHE_BYTES; label="(c') decoded_max_side $CAP + cold cache" ;;
      c) cap=$CAP; cache=$CACHE_BYTES; warm=yes
         label="(c) decoded_max_side $CAP + cache" ;;
    esac
    read -r rate ms hits misses < <(measure "$cap" "$cache" "$warm")
    [ -n "$base_rate" ] || { base_rate=$rate; base_ms=$ms; }
    python3 -c 'import sys
round_, label, rate, ms, base_rate, base_ms, cores, hits, misses = sys.argv[1:]
cache = "-" if hits == "-" else f"{float(hits):.0f} / {float(misses):.0f}"
print(f"| {round_} | {label} | {rate} | {float(rate) / int(cores):.0f} | "
      f"{float(rate) / float(base_rate):.2f}x | {ms} | "
      f"{float(ms) / max(float(base_ms), 1e-9):.2f}x | {cache} |")' \
      "$round" "$label" "$rate" "$ms" "$base_rate" "$base_ms" "$CORES" \
      "$hits" "$misses"
  done
done
echo
echo "capped (decoded_max_side) against the default pipeline, same plan:"
"$BUILD/bench/batchd-capped-diff" --dataset "$DATA" --size "$SIZE" \
  --caps "${BATCHD_BENCH_DIFF_CAPS:-$CAP}" --max_images 200
