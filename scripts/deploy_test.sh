#!/usr/bin/env bash
# The container path, really run (`make deploy-test`):
#  1. installs Debian's docker.io, docker-compose and debootstrap if missing,
#     and starts dockerd (without a bridge network) if none is running;
#  2. builds a Debian 12 base image with debootstrap from the mirror apt
#     uses, once (deploy/make-base-image.sh; Docker Hub is not needed);
#  3. builds the images of docker-compose.yml on that base;
#  4. runs the stack and checks that the trainer exits 0 with every epoch
#     covering the dataset exactly once, and that Prometheus reports both
#     daemons up;
#  5. runs the trainer against batchd-s3, which reads the same images as
#     tar shards from the stack's S3-compatible store through a cache a
#     third of the dataset's size, and checks its coverage too;
#  6. runs the trainer again, kills one daemon with `docker kill` after its
#     first epoch, and checks that the trainer still finishes with full
#     coverage from the other daemon;
#  7. tears everything down, also when a step fails.
# Everything runs on the host network and listens on 127.0.0.1.
#   scripts/deploy_test.sh
# Environment: BATCHD_BASE_TAG (default batchd-base:bookworm),
# DEPLOY_TEST_KEEP=1 leaves the stack running for inspection.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
BASE_TAG=${BATCHD_BASE_TAG:-batchd-base:bookworm}
PROJECT=batchd-deploy-test
LOG_DIR=$(mktemp -d /tmp/batchd-deploy-test.XXXXXX)

step() { echo "== [$(( $(date +%s) - start )) s] $*"; }
fail() { echo "deploy-test: FAILED: $*" >&2; exit 1; }

# 1. The engine and the tools.
./scripts/install_deps.sh docker.io docker-compose debootstrap
if ! docker info >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || fail "no Docker engine is running and starting one needs root"
  step "starting dockerd --bridge=none --iptables=false (log: /var/log/batchd-dockerd.log)"
  # Without a bridge and iptables rules: containers use the host network.
  setsid dockerd --bridge=none --iptables=false \
    >/var/log/batchd-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 ||
    { tail -20 /var/log/batchd-dockerd.log >&2; fail "dockerd did not start within 30 s"; }
fi

# Ports the stack listens on; something else on one of them would answer
# the checks instead of the stack.
PORTS="7070 7071 7072 7073 7074 7075 4568 9090"
for port in $PORTS; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    fail "127.0.0.1:$port is already in use; the compose stack needs ports $PORTS"
  fi
done

# docker-compose v1 builds through the engine's classic builder (its
# `network: host` reaches the apt mirror); not through a docker CLI that
# may be another version than the engine.
export COMPOSE_DOCKER_CLI_BUILD=0 DOCKER_BUILDKIT=0
COMPOSE=(docker-compose --project-name "$PROJECT" --file docker-compose.yml)
teardown() {
  local rc=$?
  if [ "${DEPLOY_TEST_KEEP:-0}" = 1 ]; then
    echo "== DEPLOY_TEST_KEEP=1: the stack keeps running; stop it with" \
         "${COMPOSE[*]} down --volumes"
  else
    "${COMPOSE[@]}" logs --no-color > "$LOG_DIR/compose.log" 2>&1 || true
    docker rm --force "${PROJECT}_trainer_kill" > /dev/null 2>&1 || true
    "${COMPOSE[@]}" down --volumes --remove-orphans --timeout 15 \
      > "$LOG_DIR/down.log" 2>&1 || echo "deploy-test: compose down failed" \
                                        "(see $LOG_DIR/down.log)" >&2
  fi
  if [ $rc -ne 0 ]; then
    echo "deploy-test: logs in $LOG_DIR" >&2
  else
    rm -rf "$LOG_DIR"
  fi
  exit $rc
}
trap teardown EXIT

# 2. The base image (cached under its tag).
step "base image $BASE_TAG"
./deploy/make-base-image.sh "$BASE_TAG"

# npm in the s3 store's image build trusts what this host trusts (a
# registry reached through a TLS-inspecting proxy): deploy/build-ca.
host_ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
if [ -s "$host_ca" ] && ! cmp -s "$host_ca" deploy/build-ca/host.pem; then
  cp "$host_ca" deploy/build-ca/host.pem
fi

# 3. The images, on that base. Only changed layers are rebuilt.
step "building the images (BASE=$BASE_TAG; log: $LOG_DIR/build.log)"
BATCHD_BASE=$BASE_TAG "${COMPOSE[@]}" build > "$LOG_DIR/build.log" 2>&1 ||
  { tail -30 "$LOG_DIR/build.log" >&2; fail "docker-compose build failed"; }
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' |
  grep -E '^batchd(-trainer|-prometheus)?:dev ' | sed 's/^/   /'

# 4. The whole stack: dataset, two daemons, trainer, Prometheus.
step "docker-compose up"
"${COMPOSE[@]}" up --detach --no-build > "$LOG_DIR/up.log" 2>&1 ||
  { cat "$LOG_DIR/up.log" >&2; fail "docker-compose up failed"; }

# Waits (at most $2 s) for service $1's container to exit; prints its code.
wait_exit() {
  local service=$1 limit=$2 id status
  for _ in $(seq $(( limit * 2 ))); do
    id=$("${COMPOSE[@]}" ps --quiet "$service" 2>/dev/null || true)
    if [ -n "$id" ]; then
      status=$(docker inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$id")
      if [ "${status% *}" = exited ]; then echo "${status#* }"; return 0; fi
    fi
    sleep 0.5
  done
  return 1
}
code=$(wait_exit trainer 600) ||
  { "${COMPOSE[@]}" logs --no-color --tail 30 >&2; fail "the trainer did not finish within 600 s"; }
"${COMPOSE[@]}" logs --no-color trainer > "$LOG_DIR/trainer.log" 2>&1
sed -n 's/^[^|]*| //p' "$LOG_DIR/trainer.log" | sed 's/^/   /'
[ "$code" = 0 ] || fail "the trainer exited $code"
grep -q '^coverage: ok' <(sed 's/^[^|]*| //' "$LOG_DIR/trainer.log") ||
  fail "the trainer's log has no 'coverage: ok'"
step "trainer: exit 0, every epoch covered the dataset exactly once"

# Prometheus scrapes every 2 s; give it 60 s to see both daemons up.
step "Prometheus: up{job=\"batchd\"} on 127.0.0.1:9090"
python3 - <<'EOF' || fail "Prometheus did not report both daemons up"
import json, sys, time, urllib.parse, urllib.request
url = ("http://127.0.0.1:9090/api/v1/query?" +
       urllib.parse.urlencode({"query": 'up{job="batchd"}'}))
expected = {"127.0.0.1:7071", "127.0.0.1:7073"}
deadline = time.monotonic() + 60
last = "no answer"
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            result = json.load(response)["data"]["result"]
        up = {r["metric"]["instance"]: r["value"][1] for r in result}
        last = up
        if all(up.get(i) == "1" for i in expected):
            for instance in sorted(up):
                print(f"   up{{instance=\"{instance}\"}} = {up[instance]}")
            sys.exit(0)
    except (OSError, ValueError, KeyError) as error:
        last = error
    time.sleep(1)
print(f"deploy-test: Prometheus answered {last}", file=sys.stderr)
sys.exit(1)
EOF

# 5. The dataset from S3: the same trainer against batchd-s3.
step "trainer against batchd-s3 (tar shards from the S3 store, 32 MB cache, shard-aware shuffle)"
# The shard-aware shuffle keeps two shards in use at a time, which the
# cache holds; the global shuffle would read every shard for every batch.
"${COMPOSE[@]}" run --rm trainer --endpoints 127.0.0.1:7074 --dataset demo-s3 \
  --epochs 2 --batch-size 64 --shuffle-window-shards 2 \
  > "$LOG_DIR/trainer-s3.log" 2>&1 ||
  { tail -30 "$LOG_DIR/trainer-s3.log" >&2
    "${COMPOSE[@]}" logs --no-color --tail 30 batchd-s3 upload s3 >&2
    fail "the trainer against batchd-s3 failed"; }
sed 's/^/   /' "$LOG_DIR/trainer-s3.log"
grep -q '^coverage: ok' "$LOG_DIR/trainer-s3.log" ||
  fail "the trainer's log against batchd-s3 has no 'coverage: ok'"
python3 - <<'EOF' || fail "batchd-s3's metrics show no reads from the store"
import re, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:7075/metrics", timeout=5).read().decode()
requests = sum(float(m.group(1)) for m in re.finditer(
    r'^batchd_object_store_requests_total(?:\{[^}]*\})? (\S+)$', text, re.M))
print(f"   batchd-s3: {requests:.0f} requests to the store")
assert requests > 0
EOF
step "trainer: exit 0, every epoch of demo-s3 covered exactly once"

# 6. A daemon killed mid-run: the trainer's loader re-requests the dead
# daemon's batches from the other one and the epochs stay exact.
step "trainer again; docker kill batchd-b after the trainer's first epoch"
"${COMPOSE[@]}" rm --force --stop trainer > /dev/null 2>&1 || true
"${COMPOSE[@]}" run --detach --name "${PROJECT}_trainer_kill" trainer \
  --endpoints 127.0.0.1:7070,127.0.0.1:7072 --dataset demo --epochs 6 \
  --batch-size 32 > "$LOG_DIR/run.log" 2>&1 ||
  { cat "$LOG_DIR/run.log" >&2; fail "docker-compose run trainer failed"; }
for _ in $(seq 240); do
  docker logs "${PROJECT}_trainer_kill" 2>&1 | grep -q '^epoch 0:' && break
  [ "$(docker inspect --format '{{.State.Status}}' "${PROJECT}_trainer_kill")" = exited ] && break
  sleep 0.5
done
docker logs "${PROJECT}_trainer_kill" 2>&1 | grep -q '^epoch 0:' ||
  { docker logs "${PROJECT}_trainer_kill" >&2; fail "the second trainer did not finish its first epoch within 120 s"; }
docker kill "$("${COMPOSE[@]}" ps --quiet batchd-b)" > /dev/null
echo "   killed batchd-b"
kill_code=
for _ in $(seq 1200); do
  if [ "$(docker inspect --format '{{.State.Status}}' "${PROJECT}_trainer_kill")" = exited ]; then
    kill_code=$(docker inspect --format '{{.State.ExitCode}}' "${PROJECT}_trainer_kill")
    break
  fi
  sleep 0.5
done
docker logs "${PROJECT}_trainer_kill" > "$LOG_DIR/trainer-kill.log" 2>&1 || true
docker rm --force "${PROJECT}_trainer_kill" > /dev/null 2>&1 || true
sed 's/^/   /' "$LOG_DIR/trainer-kill.log"
[ -n "$kill_code" ] || fail "the trainer did not finish within 600 s of the kill"
[ "$kill_code" = 0 ] || fail "the trainer exited $kill_code after batchd-b was killed"
grep -q '^coverage: ok' "$LOG_DIR/trainer-kill.log" ||
  fail "the trainer's log has no 'coverage: ok' after the kill"
step "trainer: exit 0 and exact coverage with batchd-b killed mid-run"

step "deploy-test: passed in $(( $(date +%s) - start )) s"
