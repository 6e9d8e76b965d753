#!/bin/sh
# Container health check: exits 0 when the daemon at ENDPOINT answers.
#   batchd-healthcheck [ENDPOINT]      (default 127.0.0.1:7070)
# With batchd-health in the image it asks the gRPC health service
# (grpc.health.v1, SERVING); otherwise a ListDatasets call through
# batchd-client --list shows that the daemon accepts requests.
endpoint=${1:-127.0.0.1:7070}
if command -v batchd-health >/dev/null 2>&1; then
  exec batchd-health --endpoint "$endpoint"
fi
exec batchd-client --endpoint "$endpoint" --list >/dev/null
