#!/usr/bin/env bash
# What TLS costs on the wire, and what its levers change: batchd-wire-bench
# in plaintext and in several TLS settings (certificates from
# scripts/make_test_certs.sh), alternating within each round so that all
# see the same machine load. Prints each run's median line, then per
# setting the medians of GB/s and of CPU-s/GB on each side, and their
# ratios to plaintext.
#
# The TLS settings:
#   tls            gRPC's defaults (the daemon's and the client's): TLS 1.3,
#                  OpenSSL's first suite (AES-256-GCM), 16 KiB frames
#   tls-frame-1m   grpc.tsi.max_frame_size 1 MiB on both sides (gRPC caps
#                  TLS frames at 16 KiB, so this shows whether it does here)
#   tls-frame-4k   grpc.tsi.max_frame_size 4 KiB (smaller frames)
#   tls-aes128     TLS_AES_128_GCM_SHA256 only (through an OpenSSL config
#                  file: gRPC 1.51 has no option for TLS 1.3 suites)
#
#   bench/tls_wire.sh [BUILD_DIR] [ROUNDS] [BATCHES]     # default build 3 40
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
batches=${3:-40}
src=$(cd "$(dirname "$0")/.." && pwd)
bench=$build/bench/batchd-wire-bench
[ -x "$bench" ] || { echo "tls_wire: $bench is not built" >&2; exit 1; }
certs=$(mktemp -d /tmp/batchd-tls-wire.XXXXXX)
trap 'rm -rf "$certs"' EXIT
"$src/scripts/make_test_certs.sh" "$certs" >/dev/null
cat > "$certs/aes128.cnf" <<'CNF'
openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
Ciphersuites = TLS_AES_128_GCM_SHA256
CNF

settings=(plaintext tls tls-frame-1m tls-frame-4k tls-aes128)
run() {
  local common=(--batches="$batches" --repeats=1)
  case $1 in
    plaintext) "$bench" "${common[@]}" ;;
    tls) "$bench" "${common[@]}" --tls_dir="$certs" ;;
    tls-frame-1m) "$bench" "${common[@]}" --tls_dir="$certs" \
                    --tls_max_frame_bytes=1048576 ;;
    tls-frame-4k) "$bench" "${common[@]}" --tls_dir="$certs" \
                    --tls_max_frame_bytes=4096 ;;
    tls-aes128) OPENSSL_CONF="$certs/aes128.cnf" "$bench" "${common[@]}" \
                  --tls_dir="$certs" ;;
  esac | grep '^median'
}
lines=()
for ((i = 0; i < rounds; i++)); do
  for s in "${settings[@]}"; do
    line=$(run "$s")
    printf '%-13s %s\n' "$s:" "$line"
    lines+=("$s" "$line")
  done
done
# Medians over the rounds of: GB/s, server CPU-s/GB, client CPU-s/GB.
python3 - "${lines[@]}" <<'PY'
import re, statistics, sys
args = sys.argv[1:]
rows = {}
for name, line in zip(args[::2], args[1::2]):
    rows.setdefault(name, []).append(
        list(map(float, re.findall(r"([0-9.]+) (?:GB/s|CPU-s/GB)", line))))
med = {n: [statistics.median(c) for c in zip(*r)] for n, r in rows.items()}
p = med["plaintext"]
print("| setting | GB/s | server CPU-s/GB | client CPU-s/GB "
      "| throughput / plaintext | server CPU/GB / plaintext "
      "| client CPU/GB / plaintext |")
print("|---|---|---|---|---|---|---|")
for n, m in med.items():
    print(f"| {n} | {m[0]:.2f} | {m[1]:.3f} | {m[2]:.3f} | "
          f"{m[0] / p[0]:.2f}x | {m[1] / p[1]:.2f}x | {m[2] / p[2]:.2f}x |")
PY
