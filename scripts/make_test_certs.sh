#!/usr/bin/env bash
# Creates a private CA, a server certificate and a client certificate for
# batchd's TLS and mutual TLS, for local use and for the tests:
#
#   scripts/make_test_certs.sh OUT_DIR [SERVER_NAME ...]
#
# OUT_DIR gets ca.pem (give it to clients as --tls-ca, and to the daemon as
# --tls-client-ca for mutual TLS), server.pem and server.key (the daemon's
# --tls-cert and --tls-key) and client.pem and client.key (a client's
# --tls-cert and --tls-key), plus ca.key to sign more. The server
# certificate is valid for localhost, 127.0.0.1, ::1 and every SERVER_NAME
# (e.g. batchd.ml.svc.cluster.local). Keys are ECDSA P-256; certificates
# last 30 days. Production certificates come from your own CA or
# cert-manager, not from this script.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [SERVER_NAME ...]" >&2
  exit 2
fi
command -v openssl >/dev/null ||
  { echo "make_test_certs: openssl is not installed (Debian package openssl)" >&2; exit 1; }
out=$1
shift
mkdir -p "$out"
cd "$out"

san="DNS:localhost,IP:127.0.0.1,IP:::1"
for name in "$@"; do san="$san,DNS:$name"; done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

key ca.key
openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=batchd test CA $(date +%s%N)" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.pem

# sign NAME SUBJECT EXTENSIONS: NAME.key and NAME.pem, signed by ca.key.
sign() {
  key "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -sha256 -days 30 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign server "/CN=batchd" "subjectAltName=$san
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature"
sign client "/CN=batchd-client" "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature"
rm -f ca.srl
echo "make_test_certs: wrote ca.pem, server.pem, server.key, client.pem, client.key to $out"
