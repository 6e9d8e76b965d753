#!/usr/bin/env bash
# Tar shards read from local disk, from nginx (HTTP) and from an S3 server
# (s3rver, SigV4 checked), all on the loopback, side by side: one
# batchd-client at full speed against a fresh daemon per run, images/s and
# the ratio to local disk.
#   bench/remote.sh BUILD [epochs] [rounds]
#   bench/remote.sh build 2 2
# Runs, each `rounds` times (alternating, median reported):
#   local        the shards on local disk
#   nginx/s3 cold  an empty cache that holds the dataset (1 epoch)
#   nginx/s3 warm  a restarted daemon on the filled cache (`epochs`)
#   s3 25% cache   a cache of a quarter of the dataset, cold, with the
#                  global shuffle and with the shard-aware shuffle
#                  (--shuffle_window_shards 2), `epochs` epochs
# Then a cache of 75 % with the shard-aware shuffle over nginx, with and
# without BATCHD_BENCH_LATENCY_MS (default 20) added to every request
# (batchd-latency-proxy in front of nginx): what prefetching hides once the
# cache holds what is in flight (the window's shards and those of the
# client's 8 batches ahead, about 12 shards of 50 images here).
# BATCHD_BENCH_DAEMON_FLAGS adds daemon flags to every run.
#
# First, the shard cache's table (issue 40): for the per-sample shuffle
# and the shard-aware windows 1 and 2, and caches of 25 % and 100 % of the
# dataset, one cold epoch from the S3 server: the bytes fetched from the
# store (batchd_object_store_bytes_total after the epoch minus after the
# start, so the index reads are not in it) against the range-read lower
# bound (the image members' bytes), and images/s against local disk with
# the same shuffle. BATCHD_BENCH_BEFORE=BUILD2 runs every row with a second
# build too (alternating, same daemon flags): "before" and "after" side by
# side. BATCHD_BENCH_TABLE_ONLY=1 stops after this table (and the latency
# rows below it, run for both builds).
set -euo pipefail
export BATCHD_START_WAIT_S=${BATCHD_START_WAIT_S:-300}
BUILD=${1:?BUILD}
EPOCHS=${2:-2}
ROUNDS=${3:-2}
DATA=${BATCHD_BENCH_DATA:-data/bench}
IMAGES=${BATCHD_BENCH_IMAGES:-1000}  # when DATA has to be generated
SHARD_SIZE=${BATCHD_BENCH_SHARD_SIZE:-50}
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/../testing/shell/bench_data.sh"
bench_require "$BUILD" server/batchd client/batchd-client tools/make_dataset tools/batchd-prep bench/batchd-latency-proxy
bench_dataset "$BUILD" "$DATA" "$IMAGES"
RUN=$(mktemp -d)
source "$REPO/testing/shell/batchd_daemon.sh"
source "$REPO/testing/shell/object_servers.sh"
export BATCHD_S3RVER_MODULES=${BATCHD_S3RVER_MODULES:-$(cd "$BUILD" && pwd)/testing/s3rver/node_modules}
SERVERS=()
cleanup() {
  object_server_stop ${SERVERS[@]+"${SERVERS[@]}"}
  rm -rf "$RUN"
}
trap cleanup EXIT

SHARDS=$RUN/shards
"$BUILD/tools/batchd-prep" --input "$DATA" --out "$SHARDS" \
  --shard-size "$SHARD_SIZE" --quiet
NSHARDS=$(ls "$SHARDS"/*.tar | wc -l)
DATA_BYTES=$(cat "$SHARDS"/*.tar | wc -c)
nginx_start "$RUN" "$SHARDS"
SERVERS+=("$NGINX_PID")
s3_start "$RUN" bench
SERVERS+=("$S3_PID")
s3_put_dir "$RUN" bench shards/ "$SHARDS"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
LAST=$(printf "%06d" $((NSHARDS - 1)))

# config NAME PATH [endpoint] -> a config file naming dataset "bench"
config() {
  local file=$RUN/$1.conf
  {
    echo "datasets { name: \"bench\" path: \"$2\" format: TAR_SHARDS"
    [ -z "${3:-}" ] || echo "  endpoint: \"$3\""
    echo "}"
  } > "$file"
  echo "$file"
}
LATENCY_MS=${BATCHD_BENCH_LATENCY_MS:-20}
rm -f "$RUN/proxy.port"
"$BUILD/bench/batchd-latency-proxy" --upstream_port "$NGINX_PORT" \
  --latency_ms "$LATENCY_MS" --port_file "$RUN/proxy.port" > "$RUN/proxy.log" 2>&1 &
SERVERS+=($!)
for _ in $(seq 100); do [ -s "$RUN/proxy.port" ] && break; sleep 0.05; done
PROXY_PORT=$(cat "$RUN/proxy.port")
LOCAL_CONF=$(config local "$SHARDS")
HTTP_CONF=$(config http "http://127.0.0.1:$NGINX_PORT/shard-{000000..$LAST}.tar")
S3_CONF=$(config s3 "s3://bench/shards/" "http://127.0.0.1:$S3_PORT")
LATENCY_CONF=$(config latency "http://127.0.0.1:$PROXY_PORT/shard-{000000..$LAST}.tar")

# run CONF CACHE_DIR CACHE_BYTES EPOCHS WINDOW -> images/s of the run
run() {
  local conf=$1 cache_dir=$2 cache_bytes=$3 epochs=$4 window=$5
  local flags=(--config "$conf" --workers "$(nproc)" ${BATCHD_BENCH_DAEMON_FLAGS:-})
  [ -z "$cache_dir" ] || flags+=(--cache-dir "$cache_dir" --cache-bytes "$cache_bytes")
  batchd_start "$RUN" daemon "$BUILD/server/batchd" "${flags[@]}"
  local daemon=$BATCHD_PID
  local client=("$BUILD/client/batchd-client" --endpoint "127.0.0.1:$BATCHD_PORT"
    --dataset bench --batch_size 64 --size 224 --prefetch 8 --epochs "$epochs")
  [ "$window" = 0 ] || client+=(--shuffle_window_shards "$window")
  "${client[@]}" > "$RUN/client.txt"
  batchd_stop "$daemon"
  sed -n 's/^total: .* \([0-9.]*\) images\/s.*/\1/p' "$RUN/client.txt"
}

median() { printf "%s\n" "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# measure BUILD CONF CACHE_DIR CACHE_BYTES WINDOW -> "images/s fetched_bytes"
# for one cold epoch.
measure() {
  local build=$1 conf=$2 cache_dir=$3 cache_bytes=$4 window=$5
  # Cold shards; the index sidecar is kept (a large dataset's first start
  # from s3rver reads its headers for minutes).
  rm -rf "${cache_dir:-/nonexistent}/shards" "$RUN/metrics.port"
  # The last run's cache files written back now, not during this run: a
  # cold epoch writes the dataset to its cache, and the same build measured
  # right after another's 100 % row ran 16-18 % slower than before it.
  sync
  local flags=(--config "$conf" --workers "$(nproc)" --metrics-port 0
    --metrics-port-file "$RUN/metrics.port" ${BATCHD_BENCH_DAEMON_FLAGS:-})
  [ -z "$cache_dir" ] || flags+=(--cache-dir "$cache_dir" --cache-bytes "$cache_bytes")
  batchd_start "$RUN" daemon "$build/server/batchd" "${flags[@]}" || return 1
  local daemon=$BATCHD_PID
  for _ in $(seq 100); do [ -s "$RUN/metrics.port" ] && break; sleep 0.05; done
  local url=http://127.0.0.1:$(cat "$RUN/metrics.port")/metrics
  store_bytes() {
    curl -s "$url" | awk '/^batchd_object_store_bytes_total/ {s += $2} END {printf "%d", s}'
  }
  local start
  start=$(store_bytes)
  local client=("$build/client/batchd-client" --endpoint "127.0.0.1:$BATCHD_PORT"
    --dataset bench --batch_size 64 --size 224 --prefetch 8 --epochs 1)
  [ "$window" = 0 ] || client+=(--shuffle_window_shards "$window")
  "${client[@]}" > "$RUN/client.txt"
  sleep 0.5  # background downloads the epoch started count too
  local end
  end=$(store_bytes)
  batchd_stop "$daemon"
  echo "$(sed -n 's/^total: .* \([0-9.]*\) images\/s.*/\1/p' "$RUN/client.txt") $((end - start))"
}

BEFORE=${BATCHD_BENCH_BEFORE:-}
[ -z "$BEFORE" ] || bench_require "$BEFORE" server/batchd client/batchd-client bench/batchd-latency-proxy
MEMBER_BYTES=$(python3 -c 'import sys, tarfile
print(sum(m.size for f in sys.argv[1:] for m in tarfile.open(f)
          if not m.name.endswith(".cls")))' "$SHARDS"/*.tar)
declare -A table
builds=(after)
[ -z "$BEFORE" ] || builds=(before after)
# Each round swaps which build runs first: what one run leaves behind
# (page cache, the store's state) must not favour one build.
swap() { [ ${#builds[@]} -lt 2 ] || builds=("${builds[1]}" "${builds[0]}"); }
build_dir() { [ "$1" = before ] && echo "$BEFORE" || echo "$BUILD"; }
for round in $(seq "$ROUNDS"); do
  swap
  for window in 0 1 2; do
    # A failed run stops the benchmark (a command substitution's failure
    # would not).
    got=$(measure "$BUILD" "$LOCAL_CONF" "" 0 "$window") || exit 1
    table[local-$window]+=" ${got%% *}"
    for percent in 25 100; do
      for b in "${builds[@]}"; do
        got=$(measure "$(build_dir "$b")" "$S3_CONF" "$RUN/cache-table-$b-s3" \
          $((DATA_BYTES * percent / 100)) "$window") || exit 1
        table[$b-$window-$percent]+=" ${got/ /,}"
      done
    done
  done
  # The latency target: shard-aware (window 2), a cache of 75 %, nginx with
  # and without LATENCY_MS added to every request, each build.
  for b in "${builds[@]}"; do
    for conf in "$HTTP_CONF" "$LATENCY_CONF"; do
      key=$b-latency-$([ "$conf" = "$HTTP_CONF" ] && echo 0 || echo "$LATENCY_MS")
      got=$(measure "$(build_dir "$b")" "$conf" "$RUN/cache-table-$key" \
        $((DATA_BYTES * 3 / 4)) 2) || exit 1
      table[$key]+=" ${got%% *}"
    done
  done
done

builds=(after)
[ -z "$BEFORE" ] || builds=(before after)
echo "shard cache table: $NSHARDS shards of $SHARD_SIZE images ($DATA_BYTES bytes," \
  "image members $MEMBER_BYTES bytes) from s3rver; one cold epoch; daemon" \
  "--workers $(nproc); 224 px, batch 64; median of $ROUNDS"
printf "| shuffle | cache | build | fetched MB | x members | images/s | x local |\n"
printf "|---|---|---|---|---|---|---|\n"
for window in 0 1 2; do
  shuffle=per-sample
  [ "$window" = 0 ] || shuffle="window $window"
  base=$(median ${table[local-$window]})
  printf "| %s | - | local disk | - | - | %.0f | 1.00x |\n" "$shuffle" "$base"
  for percent in 25 100; do
    for b in "${builds[@]}"; do
      rates=() fetched=()
      for pair in ${table[$b-$window-$percent]}; do
        rates+=("${pair%,*}") fetched+=("${pair#*,}")
      done
      python3 -c 'import sys
shuffle, percent, b, rate, fetched, members, base = sys.argv[1:]
rate, fetched, members, base = float(rate), int(fetched), int(members), float(base)
print(f"| {shuffle} | {percent} % | {b} | {fetched / 1e6:.1f} | "
      f"{fetched / members:.2f}x | {rate:.0f} | {rate / base:.2f}x |")' \
        "$shuffle" "$percent" "$b" "$(median "${rates[@]}")" \
        "$(median "${fetched[@]}")" "$MEMBER_BYTES" "$base"
    done
  done
done
echo
echo "nginx, 75 % cache, shard-aware (window 2), one cold epoch:"
printf "| build | latency per request | images/s | x no latency |\n|---|---|---|---|\n"
for b in "${builds[@]}"; do
  python3 -c 'import sys
b, ms, a, c = sys.argv[1:]
print(f"| {b} | 0 | {float(a):.0f} | 1.00x |")
print(f"| {b} | {ms} ms | {float(c):.0f} | {float(c) / float(a):.2f}x |")' \
    "$b" "$LATENCY_MS" "$(median ${table[$b-latency-0]})" \
    "$(median ${table[$b-latency-$LATENCY_MS]})"
done
[ -z "${BATCHD_BENCH_TABLE_ONLY:-}" ] || exit 0
echo

declare -A rates
QUARTER=$((DATA_BYTES / 4))
THREE_QUARTERS=$((DATA_BYTES * 3 / 4))
FULL=$((DATA_BYTES * 2))
for round in $(seq "$ROUNDS"); do
  rates[local]+=" $(run "$LOCAL_CONF" "" 0 "$EPOCHS" 0)"
  rates[local-window]+=" $(run "$LOCAL_CONF" "" 0 "$EPOCHS" 2)"
  for store in http s3; do
    conf=$HTTP_CONF
    [ "$store" = s3 ] && conf=$S3_CONF
    rm -rf "$RUN/cache-$store"
    rates[$store-cold]+=" $(run "$conf" "$RUN/cache-$store" "$FULL" 1 0)"
    rates[$store-warm]+=" $(run "$conf" "$RUN/cache-$store" "$FULL" "$EPOCHS" 0)"
  done
  for window in 0 2; do
    rm -rf "$RUN/cache-quarter"
    rates[s3-quarter-$window]+=" $(run "$S3_CONF" "$RUN/cache-quarter" "$QUARTER" "$EPOCHS" "$window")"
  done
  for conf in "$HTTP_CONF" "$LATENCY_CONF"; do
    rm -rf "$RUN/cache-latency"
    key=latency-$([ "$conf" = "$HTTP_CONF" ] && echo 0 || echo "$LATENCY_MS")
    rates[$key]+=" $(run "$conf" "$RUN/cache-latency" "$THREE_QUARTERS" "$EPOCHS" 2)"
  done
done

echo "dataset $DATA as $NSHARDS shards of $SHARD_SIZE images ($((DATA_BYTES / 1000000)) MB);" \
  "daemon --workers $(nproc) on $(nproc) cores; 224 px, batch 64; median of $ROUNDS"
printf "| source | cache | shuffle | epochs | images/s | per core | x local |\n"
printf "|---|---|---|---|---|---|---|\n"
base=$(median ${rates[local]})
base_window=$(median ${rates[local-window]})
row() {  # row SOURCE CACHE SHUFFLE EPOCHS KEY BASE
  local rate
  rate=$(median ${rates[$5]})
  python3 -c 'import sys
source, cache, shuffle, epochs, rate, base, cores = sys.argv[1:]
rate, base = float(rate), float(base)
print(f"| {source} | {cache} | {shuffle} | {epochs} | {rate:.0f} | "
      f"{rate / int(cores):.0f} | {rate / base:.2f}x |")' "$1" "$2" "$3" "$4" "$rate" "$6" "$(nproc)"
}
row "local disk" - global "$EPOCHS" local "$base"
row "local disk" - "shards, window 2" "$EPOCHS" local-window "$base"
row nginx "cold, 2x data" global 1 http-cold "$base"
row nginx "warm, 2x data" global "$EPOCHS" http-warm "$base"
row s3rver "cold, 2x data" global 1 s3-cold "$base"
row s3rver "warm, 2x data" global "$EPOCHS" s3-warm "$base"
row s3rver "cold, 25 %" global "$EPOCHS" s3-quarter-0 "$base"
row s3rver "cold, 25 %" "shards, window 2" "$EPOCHS" s3-quarter-2 "$base_window"
echo "(the last row is against local disk with the same shard-aware shuffle)"
echo
echo "nginx, 75 % cache, shard-aware shuffle (window 2), $EPOCHS epochs:"
printf "| latency per request | images/s | x no latency |\n|---|---|---|\n"
no_latency=$(median ${rates[latency-0]})
with_latency=$(median ${rates[latency-$LATENCY_MS]})
python3 -c 'import sys
ms, a, b = sys.argv[1:]
print(f"| 0 | {float(a):.0f} | 1.00x |")
print(f"| {ms} ms | {float(b):.0f} | {float(b) / float(a):.2f}x |")' "$LATENCY_MS" "$no_latency" "$with_latency"
