# Object servers for the shell benchmarks: Debian's nginx serving a
# directory over HTTP (ranges and ETags on), and s3rver with SigV4 checked
# (testing/s3rver/s3_server.js), filled through deploy/s3-upload.sh. The
# C++ tests have their own launchers (testing/object_servers.h). Source it:
#
#   source testing/shell/object_servers.sh
#   nginx_start "$RUN" "$SHARDS"          # -> NGINX_PID, NGINX_PORT
#   s3_start "$RUN" bucket                 # -> S3_PID, S3_PORT
#   s3_put_dir "$RUN" bucket prefix/ "$SHARDS"
#   object_server_stop "$NGINX_PID" "$S3_PID"
#
# Both listen on 127.0.0.1 only. s3rver's modules come from the npm
# install the build made (BATCHD_S3RVER_MODULES, default
# build/testing/s3rver/node_modules).

OBJECT_SERVERS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_wait_port() {  # _wait_port PORT PID NAME LOG
  local _
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  echo "$3 did not start; its log:" >&2
  tail -20 "$4" >&2
  return 1
}

nginx_start() {
  local run=$1 root=$2
  NGINX_PORT=$(_free_port)
  mkdir -p "$run/nginx"
  # As root nginx's workers would switch to nobody, who cannot read a
  # private temporary directory.
  local user=""
  [ "$(id -u)" -eq 0 ] && user="user root root;"
  cat > "$run/nginx/nginx.conf" <<CONF
daemon off;
$user
worker_processes 1;
pid $run/nginx/nginx.pid;
error_log $run/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $run/nginx/body;
  proxy_temp_path $run/nginx/proxy;
  fastcgi_temp_path $run/nginx/fastcgi;
  uwsgi_temp_path $run/nginx/uwsgi;
  scgi_temp_path $run/nginx/scgi;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $root;
  }
}
CONF
  /usr/sbin/nginx -e "$run/nginx/error.log" -c "$run/nginx/nginx.conf" \
    2>>"$run/nginx/error.log" &
  NGINX_PID=$!
  _wait_port "$NGINX_PORT" "$NGINX_PID" nginx "$run/nginx/error.log"
}

s3_start() {
  local run=$1 bucket=$2
  local modules=${BATCHD_S3RVER_MODULES:-$OBJECT_SERVERS_DIR/build/testing/s3rver/node_modules}
  [ -d "$modules/s3rver" ] ||
    { echo "no s3rver in $modules (set BATCHD_S3RVER_MODULES)" >&2; return 1; }
  mkdir -p "$run/s3"
  rm -f "$run/s3/port"
  node --openssl-legacy-provider "$OBJECT_SERVERS_DIR/testing/s3rver/s3_server.js" \
    --modules "$modules" \
    --directory "$run/s3" --port 0 --bucket "$bucket" \
    --port-file "$run/s3.port" > "$run/s3.log" 2>&1 &
  S3_PID=$!
  local _
  for _ in $(seq 200); do
    [ -s "$run/s3.port" ] && { S3_PORT=$(cat "$run/s3.port"); return 0; }
    kill -0 "$S3_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "s3rver did not start; its log:" >&2
  tail -20 "$run/s3.log" >&2
  return 1
}

s3_put_dir() {  # s3_put_dir RUN BUCKET PREFIX DIR (s3rver's keys)
  AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \
    "$OBJECT_SERVERS_DIR/deploy/s3-upload.sh" "http://127.0.0.1:$S3_PORT" \
    "$2" "$3" "$4" > /dev/null
}

object_server_stop() {
  local pid
  for pid in "$@"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
