#!/usr/bin/env bash
# Validates the deployment files, as the ctest test deploy_manifests runs it:
#   deploy/check_manifests.sh SOURCE_DIR BATCHD_BINARY WORK_DIR
# 1. `kubectl kustomize deploy/k8s` renders the Kubernetes base, and
#    deploy/k8s-demand-hpa the overlay that scales on the demand metric,
#    and deploy/k8s-s3 the one that reads tar shards from S3;
# 2. every rendered object validates against the Kubernetes API schemas
#    (deploy/k8s/validate/validate.js, npm package kubernetes-models, installed
#    with `npm ci` from the committed package-lock.json into WORK_DIR);
# 3. every flag that a manifest or docker-compose.yml passes to the daemon
#    exists in `batchd --help`.
# A missing tool or an unreachable npm registry fails the test: a skipped
# validation would look like a passed one.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 SOURCE_DIR BATCHD_BINARY WORK_DIR" >&2
  exit 2
fi
SRC=$1 BATCHD=$2 WORK=$3
VALIDATE_SRC=$SRC/deploy/k8s/validate
fail() { echo "check_manifests: $*" >&2; exit 1; }

for tool in kubectl node npm; do
  command -v "$tool" >/dev/null ||
    fail "$tool is not installed (kubectl: Debian's kubernetes-client; node and npm: Node.js 18 or later)"
done
[ -x "$BATCHD" ] || fail "no daemon binary at $BATCHD"

mkdir -p "$WORK/validate"
kubectl kustomize "$SRC/deploy/k8s" > "$WORK/rendered.yaml" ||
  fail "kubectl kustomize $SRC/deploy/k8s failed"
echo "rendered $(grep -c '^kind:' "$WORK/rendered.yaml") objects from deploy/k8s"
kubectl kustomize "$SRC/deploy/k8s-demand-hpa" > "$WORK/rendered-demand-hpa.yaml" ||
  fail "kubectl kustomize $SRC/deploy/k8s-demand-hpa failed"
grep -q 'name: batchd_capacity_demand_ratio' "$WORK/rendered-demand-hpa.yaml" ||
  fail "deploy/k8s-demand-hpa does not target batchd_capacity_demand_ratio"
kubectl kustomize "$SRC/deploy/k8s-s3" > "$WORK/rendered-s3.yaml" ||
  fail "kubectl kustomize $SRC/deploy/k8s-s3 failed"
grep -q 'path: "s3://' "$WORK/rendered-s3.yaml" ||
  fail "deploy/k8s-s3 does not configure an s3:// dataset"
grep -q 'name: batchd-s3-credentials' "$WORK/rendered-s3.yaml" ||
  fail "deploy/k8s-s3 does not take the S3 keys from the batchd-s3-credentials Secret"
! grep -q 'kind: PersistentVolumeClaim' "$WORK/rendered-s3.yaml" ||
  fail "deploy/k8s-s3 still has the base's dataset volume claim"

# npm ci only when the lockfile changed since the last install here; it
# needs the registry, and its failure is the test's.
cp "$VALIDATE_SRC/package.json" "$VALIDATE_SRC/package-lock.json" \
   "$VALIDATE_SRC/validate.js" "$WORK/validate/"
stamp=$(sha256sum "$VALIDATE_SRC/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$WORK/validate/.installed" 2>/dev/null)" != "$stamp" ] ||
   [ ! -d "$WORK/validate/node_modules" ]; then
  rm -f "$WORK/validate/.installed"
  (cd "$WORK/validate" &&
   timeout 300 npm ci --no-audit --no-fund --loglevel=error) ||
    fail "npm ci in $WORK/validate failed: the npm registry ($(npm config get registry)) must be reachable to install kubernetes-models"
  echo "$stamp" > "$WORK/validate/.installed"
fi

# The daemon's flags. absl's --help lists only the flags of source files
# named after the program (none for server/main.cc), so the names come
# from --helpfull's per-file lists, plus the ones its usage text names
# (--dataset is parsed by hand, not an absl flag).
# `batchd top`'s own flags, on a line of the usage text, do not count.
{
  "$BATCHD" --help 2>&1 || true
  "$BATCHD" --helpfull 2>&1 || true
} | grep -v 'batchd top' | grep -oE -- '--[a-z][a-z0-9_-]*' | sed 's/^--//' | sort -u > "$WORK/daemon-flags.txt"
grep -qx port "$WORK/daemon-flags.txt" ||
  fail "$BATCHD --help/--helpfull listed no --port flag; cannot check flags"

for rendered in "$WORK/rendered.yaml" "$WORK/rendered-demand-hpa.yaml" \
                "$WORK/rendered-s3.yaml"; do
  node "$WORK/validate/validate.js" --manifests "$rendered" \
    --compose "$SRC/docker-compose.yml" --daemon-flags "$WORK/daemon-flags.txt"
done
