#!/usr/bin/env bash
# The demo: generate a sample dataset, start the daemon (with its Prometheus
# endpoint), stream two epochs with the command-line client, show one frame
# of `batchd top`, stop the daemon cleanly, and end with the diagnosis.
#   scripts/demo.sh [build-dir]
# BATCHD_DEMO_FORMAT=shards serves the same images from WebDataset tar
# shards written by batchd-prep instead of the ImageFolder
# (make demo BATCHD_DEMO_FORMAT=shards).
set -euo pipefail
BUILD=${1:-build}
DATA=${BATCHD_DEMO_DATA:-data/demo}
IMAGES=${BATCHD_DEMO_IMAGES:-1024}
WORKERS=${BATCHD_DEMO_WORKERS:-$(nproc)}
FORMAT=${BATCHD_DEMO_FORMAT:-folder}

if [ ! -f "$DATA/.complete" ]; then
  echo "== generating $IMAGES ImageNet-like JPEGs in $DATA"
  rm -rf "$DATA"
  "$BUILD/tools/make_dataset" --out "$DATA" --images "$IMAGES" --classes 10 --seed 1
  touch "$DATA/.complete"
fi
SERVE=$DATA
case "$FORMAT" in
  folder) ;;
  shards)
    SERVE="$DATA-shards"
    if [ ! -f "$SERVE/.complete" ]; then
      echo "== writing $DATA as tar shards in $SERVE (batchd-prep)"
      rm -rf "$SERVE"
      "$BUILD/tools/batchd-prep" --input "$DATA" --out "$SERVE" --shard-size 256
      touch "$SERVE/.complete"
    fi
    ;;
  *) echo "BATCHD_DEMO_FORMAT must be folder or shards, not '$FORMAT'" >&2; exit 2 ;;
esac

RUN=$(mktemp -d)
DAEMON=
trap '[ -n "$DAEMON" ] && kill -TERM "$DAEMON" 2>/dev/null; rm -rf "$RUN"' EXIT
echo "== starting batchd with $WORKERS workers, serving $SERVE"
source "$(dirname "$0")/../testing/shell/batchd_daemon.sh"
batchd_start "$RUN" demo "$BUILD/server/batchd" --dataset "demo=$SERVE" \
  --metrics-port 0 --metrics-port-file "$RUN/metrics-port" --workers "$WORKERS"
DAEMON=$BATCHD_PID
PORT=$BATCHD_PORT
cat "$RUN/demo.log"
METRICS_URL="http://localhost:$(cat "$RUN/metrics-port")/metrics"
echo "== Prometheus metrics at $METRICS_URL"

echo "== streaming 2 epochs (RandomResizedCrop 224 + flip, batch 64, uint8 NHWC)"
"$BUILD/client/batchd-client" --endpoint "localhost:$PORT" --dataset demo \
  --batch_size 64 --epochs 2 --size 224 --verify --job demo | tee "$RUN/client.txt"

echo "== batchd top (one frame; without --once it refreshes every second)"
"$BUILD/client/batchd-top" --endpoint "localhost:$PORT" --once

echo "== stopping batchd"
batchd_stop "$DAEMON"
DAEMON=
echo "== done. While a daemon runs with --metrics-port, Prometheus scrapes"
echo "   $METRICS_URL and a browser shows the live page at ${METRICS_URL%metrics}"
echo "   (this one is gone now; see docs/observability.md)."
echo "== $(grep '^diagnosis: ' "$RUN/client.txt" | tail -1)"
