#!/usr/bin/env bash
# The demo: generate a sample dataset, start the daemon, stream two epochs
# with the command-line client, stop the daemon cleanly.
#   scripts/demo.sh [build-dir]
set -euo pipefail
BUILD=${1:-build}
DATA=${BATCHD_DEMO_DATA:-data/demo}
IMAGES=${BATCHD_DEMO_IMAGES:-1024}
WORKERS=${BATCHD_DEMO_WORKERS:-$(nproc)}

if [ ! -f "$DATA/.complete" ]; then
  echo "== generating $IMAGES ImageNet-like JPEGs in $DATA"
  rm -rf "$DATA"
  "$BUILD/tools/make_dataset" --out "$DATA" --images "$IMAGES" --classes 10 --seed 1
  touch "$DATA/.complete"
fi

RUN=$(mktemp -d)
trap 'kill -TERM "$DAEMON" 2>/dev/null || true; rm -rf "$RUN"' EXIT
echo "== starting batchd with $WORKERS workers"
"$BUILD/server/batchd" --dataset "demo=$DATA" --port 0 --port-file "$RUN/port" \
  --workers "$WORKERS" &
DAEMON=$!
for _ in $(seq 100); do [ -s "$RUN/port" ] && break; sleep 0.1; done
[ -s "$RUN/port" ] || { echo "batchd did not start" >&2; exit 1; }
PORT=$(cat "$RUN/port")

echo "== streaming 2 epochs (RandomResizedCrop 224 + flip, batch 64, uint8 NHWC)"
"$BUILD/client/batchd-client" --endpoint "localhost:$PORT" --dataset demo \
  --batch_size 64 --epochs 2 --size 224 --verify

echo "== stopping batchd"
kill -TERM "$DAEMON"
wait "$DAEMON"
trap 'rm -rf "$RUN"' EXIT
echo "== done"
