#!/usr/bin/env bash
# Builds a Debian 12 (bookworm) base image with debootstrap and imports it
# into the local Docker engine as TAG, for machines that cannot pull
# debian:bookworm-slim from Docker Hub. The packages come from the Debian
# mirror this machine's apt already uses, so no other network access is
# needed. An existing TAG is kept (debootstrap takes about a minute).
#   deploy/make-base-image.sh [TAG]       (default batchd-base:bookworm)
# Needs root, debootstrap and a running Docker engine.
set -euo pipefail
TAG=${1:-batchd-base:bookworm}

if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "base image $TAG: cached"
  exit 0
fi

# The first main-archive URI that apt uses for bookworm: deb822 .sources
# files (URIs:/Suites:) and one-line .list files ("deb URI SUITE ...").
# Security and third-party repositories do not carry the bookworm suite.
mirror_from_apt() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      /^[[:space:]]*$/ { if (uri != "" && suites ~ /(^| )bookworm( |$)/) { print uri; exit }
                         uri = ""; suites = ""; next }
      /^URIs:/   { uri = $2 }
      /^Suites:/ { $1 = ""; suites = $0 " " }
      END { if (uri != "" && suites ~ /(^| )bookworm( |$)/) print uri }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                       if ($(i + 1) == "bookworm") print $i }' "$f"
  done
}
MIRROR=${BATCHD_DEBIAN_MIRROR:-$(mirror_from_apt | head -1)}
if [ -z "$MIRROR" ]; then
  echo "make-base-image: no bookworm mirror found in /etc/apt/sources.list*;" \
       "set BATCHD_DEBIAN_MIRROR=http://..." >&2
  exit 1
fi
command -v debootstrap >/dev/null || {
  echo "make-base-image: debootstrap is not installed (apt-get install debootstrap)" >&2
  exit 1
}

ROOT=$(mktemp -d /var/tmp/batchd-base.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "base image $TAG: debootstrap --variant=minbase bookworm from $MIRROR"
start=$(date +%s)
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" > "$ROOT.log" 2>&1 || {
  tail -20 "$ROOT.log" >&2
  echo "make-base-image: debootstrap failed (full log: $ROOT.log)" >&2
  exit 1
}
rm -f "$ROOT.log"

# What debian:bookworm-slim does to stay small: dpkg skips documentation,
# man pages and translations on every later install, and apt keeps no
# downloaded packages. The mirror line lets Dockerfiles apt-get install.
cat > "$ROOT/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
cat > "$ROOT/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Install-Recommends "false";
EOF
echo "deb $MIRROR bookworm main" > "$ROOT/etc/apt/sources.list"
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* "$ROOT"/usr/share/doc/* \
       "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*

tar -C "$ROOT" -c . | docker import \
  --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' - "$TAG" >/dev/null
echo "base image $TAG: imported in $(( $(date +%s) - start )) s" \
     "($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1 / 1e6}'))"
