#!/usr/bin/env bash
# First end-to-end throughput figure: one daemon and the command-line client
# on loopback, RandomResizedCrop 224 + flip, uint8 NHWC, batch 64, for each
# worker count given. Prints the median images/s over epochs 1.. (epoch 0
# warms the page cache) and images/s per worker.
#   bench/throughput.sh [build-dir] [workers...]     e.g. bench/throughput.sh build 1 2
set -euo pipefail
BUILD=${1:-build}
shift || true
WORKER_COUNTS=${*:-1 2}
DATA=${BATCHD_BENCH_DATA:-data/demo}
EPOCHS=${BATCHD_BENCH_EPOCHS:-6}
if [ ! -f "$DATA/.complete" ]; then
  "$BUILD/tools/make_dataset" --out "$DATA" --images 1024 --classes 10 --seed 1
  touch "$DATA/.complete"
fi
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
source "$(dirname "$0")/../testing/shell/batchd_daemon.sh"
echo "dataset: $DATA ($(batchd_count_images "$DATA") images), $EPOCHS epochs, batch 64, 224x224"
for workers in $WORKER_COUNTS; do
  batchd_start "$RUN" daemon "$BUILD/server/batchd" --dataset "bench=$DATA" \
    --workers "$workers"
  "$BUILD/client/batchd-client" --endpoint "127.0.0.1:$BATCHD_PORT" \
    --dataset bench --batch_size 64 --size 224 --epochs "$EPOCHS" --prefetch 8 \
    > "$RUN/out.txt"
  batchd_stop "$BATCHD_PID"
  python3 - "$workers" "$RUN/out.txt" <<'PY'
import re, statistics, sys
workers = int(sys.argv[1])
rates = [float(m.group(2)) for m in
         (re.match(r"epoch (\d+): .* ([\d.]+) images/s", l) for l in open(sys.argv[2]))
         if m and int(m.group(1)) > 0]
med = statistics.median(rates)
print(f"workers {workers}: median {med:.0f} images/s (min {min(rates):.0f}, max {max(rates):.0f}, "
      f"{len(rates)} epochs), {med / workers:.0f} images/s per worker")
PY
done
