#!/usr/bin/env bash
# Before/after check of a hot-path change: CPU per image of the daemon and
# of batchd-client, for two builds run alternately on the same core.
#   bench/ab_cpu.sh BUILD_A BUILD_B [repeats] [epochs]
# e.g. build the previous commit in a worktree and compare:
#   git worktree add /tmp/base HEAD~1 && cmake -S /tmp/base -B /tmp/base/build \
#     -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C /tmp/base/build batchd \
#     batchd_client_cli
#   bench/ab_cpu.sh /tmp/base/build build 3 3
# Daemon (1 worker) and client share core 0 (taskset), as in the 1-core
# side-by-side row; a warm-up epoch runs first, then `epochs` measured ones.
# CPU is utime+stime of each process over the measured epochs (the
# daemon's from /proc, the client's from its rusage, start-up included, so
# that builds from before batchd-client reported its own CPU compare too),
# in ms per image.
set -euo pipefail
A=${1:?BUILD_A}
B=${2:?BUILD_B}
REPEATS=${3:-3}
EPOCHS=${4:-3}
DATA=${BATCHD_BENCH_DATA:-data/bench}
IMAGES=${BATCHD_BENCH_IMAGES:-1000}  # when DATA has to be generated
for build in "$A" "$B"; do
  for program in server/batchd client/batchd-client; do
    if [ ! -x "$build/$program" ]; then
      echo "error: $build/$program not found; build it first" \
        "(ninja -C $build batchd batchd_client_cli)" >&2
      exit 1
    fi
  done
done
if [ ! -f "$DATA/.complete" ]; then
  "$B/tools/make_dataset" --out "$DATA" --images "$IMAGES" --classes 10 --seed 1
  touch "$DATA/.complete"
fi
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
PIN=()
command -v taskset >/dev/null && PIN=(taskset -c 0)
source "$(dirname "$0")/../testing/shell/batchd_daemon.sh"
BATCHD_PIN=(${PIN[@]+"${PIN[@]}"})
TICKS=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

measure() {  # build -> "images/s daemon_ms client_ms"
  local build=$1
  batchd_start "$RUN" daemon "$build/server/batchd" --dataset "bench=$DATA" \
    --workers 1
  local daemon=$BATCHD_PID
  local client=(${PIN[@]+"${PIN[@]}"} "$build/client/batchd-client"
    --endpoint "127.0.0.1:$BATCHD_PORT" --dataset bench
    --batch_size 64 --size 224 --prefetch 8)
  "${client[@]}" --epochs 1 --first_epoch 0 > /dev/null
  local before after
  before=$(cpu_ticks "$daemon")
  python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"), check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime, r.ru_stime)' "$RUN/out.txt" \
    "${client[@]}" --epochs "$EPOCHS" --first_epoch 1 > "$RUN/client_cpu"
  after=$(cpu_ticks "$daemon")
  batchd_stop "$daemon"
  python3 - "$RUN/out.txt" "$RUN/client_cpu" "$before" "$after" "$TICKS" <<'PY'
import re, sys
out, client_cpu, before, after, ticks = sys.argv[1:]
m = re.search(r"^total: (\d+) images, .*?: ([\d.]+) images/s", open(out).read(), re.M)
images, rate = int(m.group(1)), float(m.group(2))
user, system = map(float, open(client_cpu).read().split())
daemon_ms = (int(after) - int(before)) / int(ticks) / images * 1e3
client_ms = (user + system) / images * 1e3
for value in (rate, daemon_ms, client_ms):
    if not value > 0:
        sys.exit(f"not a positive figure: {rate} {daemon_ms} {client_ms}")
print(f"{rate:.0f} {daemon_ms:.3f} {client_ms:.3f}")
PY
}

echo "dataset $DATA, $EPOCHS epochs per run, daemon + client on one core"
printf "%-8s %-40s %9s %10s %10s %10s\n" run build images/s daemon_ms client_ms total_ms
for r in $(seq "$REPEATS"); do
  for build in "$A" "$B"; do
    figures=$(measure "$build")
    read -r rate daemon_ms client_ms <<< "$figures"
    total=$(python3 -c "print(f'{$daemon_ms + $client_ms:.3f}')")
    printf "%-8s %-40s %9s %10s %10s %10s\n" "$r" "$build" "$rate" \
      "$daemon_ms" "$client_ms" "$total"
  done
done
