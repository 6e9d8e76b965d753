#!/usr/bin/env bash
# Installs the Debian packages given as arguments that are not installed yet.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail
missing=()
for pkg in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "batchd needs these Debian packages: ${missing[*]}" >&2
  echo "Run as root:  sudo sh -c '$cmd'" >&2
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    echo "then, as the tests need only its binaries:  sudo systemctl disable --now prometheus" >&2
  fi
  exit 1
fi
echo "Installing: ${missing[*]}"
sh -c "$cmd"
# The tests only need Debian's prometheus and promtool binaries; on a
# systemd host the package also starts a system Prometheus on :9090, which
# the compose stack's own Prometheus (make deploy-test) needs. Stop the
# service that this install started.
for pkg in "${missing[@]}"; do
  if [ "$pkg" = prometheus ] && [ -d /run/systemd/system ]; then
    echo "Stopping and disabling the prometheus service the package started"
    systemctl disable --now prometheus.service || true
  fi
done
