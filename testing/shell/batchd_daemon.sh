# The one way the shell scripts start a batchd daemon (scripts/demo.sh,
# bench/*.sh); testing/python/batchd_testing/daemon.py is its Python twin.
# Source it:
#
#   source testing/shell/batchd_daemon.sh
#   BATCHD_PIN=(taskset -c 0)      # optional: a command prefix
#   batchd_start "$RUN" a "$BUILD/server/batchd" --dataset "bench=$DATA" --workers 1
#   echo "pid $BATCHD_PID port $BATCHD_PORT, log $RUN/a.log"
#   batchd_stop "$BATCHD_PID"
#   echo "$(batchd_count_images "$DATA") images"
#
# batchd_start listens on a free loopback port (--port 0 with a port file
# in RUN), sends the daemon's stderr to RUN/NAME.log, waits up to 20 s
# (BATCHD_START_WAIT_S) for the port, and fails with the log's tail if the daemon dies or never
# serves. batchd_stop sends SIGTERM and waits for the drain.
# batchd_count_images counts an ImageFolder's images as the daemon does
# (testing/python/batchd_testing/datasets.py: every image extension, any
# case).

BATCHD_TESTING_SHELL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

batchd_start() {
  local run=$1 name=$2 binary=$3
  shift 3
  rm -f "$run/$name.port"
  ${BATCHD_PIN[@]+"${BATCHD_PIN[@]}"} "$binary" --host 127.0.0.1 --port 0 \
    --port-file "$run/$name.port" "$@" 2>"$run/$name.log" &
  BATCHD_PID=$!
  local _
  for _ in $(seq $((${BATCHD_START_WAIT_S:-20} * 20))); do
    if [ -s "$run/$name.port" ]; then
      BATCHD_PORT=$(cat "$run/$name.port")
      return 0
    fi
    kill -0 "$BATCHD_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "batchd ($name) did not start; its log:" >&2
  tail -20 "$run/$name.log" >&2
  return 1
}

batchd_stop() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

batchd_count_images() {
  python3 "$BATCHD_TESTING_SHELL_DIR/../python/batchd_testing/datasets.py" "$1"
}
