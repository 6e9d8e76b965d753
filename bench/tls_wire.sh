#!/usr/bin/env bash
# What TLS costs on the wire: batchd-wire-bench in plaintext and with TLS
# (certificates from scripts/make_test_certs.sh), alternating, in one run,
# so that both see the same machine load. Prints each run's median line,
# then the TLS/plaintext ratios of GB/s and of CPU-s/GB on each side.
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

plain=() tls=()
for ((i = 0; i < rounds; i++)); do
  p=$("$bench" --batches="$batches" --repeats=1 | grep '^median')
  t=$("$bench" --batches="$batches" --repeats=1 --tls_dir="$certs" | grep '^median')
  echo "plaintext: $p"
  echo "tls:       $t"
  plain+=("$p") tls+=("$t")
done
# Medians over the rounds of: GB/s, server CPU-s/GB, client CPU-s/GB.
python3 - "${plain[@]}" -- "${tls[@]}" <<'PY'
import re, statistics, sys
args = sys.argv[1:]
split = args.index("--")
def figures(lines):
    rows = [list(map(float, re.findall(r"([0-9.]+) (?:GB/s|CPU-s/GB)", l)))
            for l in lines]
    return [statistics.median(col) for col in zip(*rows)]
p, t = figures(args[:split]), figures(args[split + 1:])
print(f"plaintext median: {p[0]:.2f} GB/s, server {p[1]:.3f} CPU-s/GB, "
      f"client {p[2]:.3f} CPU-s/GB")
print(f"tls median:       {t[0]:.2f} GB/s, server {t[1]:.3f} CPU-s/GB, "
      f"client {t[2]:.3f} CPU-s/GB")
print(f"tls/plaintext: throughput {t[0] / p[0]:.2f}x, server CPU per GB "
      f"{t[1] / p[1]:.2f}x, client CPU per GB {t[2] / p[2]:.2f}x")
PY
