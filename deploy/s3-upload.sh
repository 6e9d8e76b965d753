#!/bin/sh
# Copies every file of a directory into an S3 bucket with curl, each request
# signed with SigV4 (curl --aws-sigv4): the compose stack's way of filling
# its S3-compatible store with the demo's tar shards.
#   s3-upload ENDPOINT BUCKET PREFIX DIR
#   s3-upload http://127.0.0.1:4568 batchd-demo demo/ /data/demo-shards
# Keys: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the [default]
# profile of the shared-credentials file AWS_SHARED_CREDENTIALS_FILE.
# AWS_REGION (default us-east-1) is the region signed for. Path-style
# URLs (ENDPOINT/BUCKET/KEY). The secret is passed to curl in a config
# file on stdin, never on its command line.
set -eu
if [ $# -ne 4 ]; then
  echo "usage: s3-upload ENDPOINT BUCKET PREFIX DIR" >&2
  exit 2
fi
endpoint=${1%/} bucket=$2 prefix=$3 dir=$4
key_of() {  # key_of NAME FILE: NAME's value in FILE's [default] profile
  sed -n '/^\[default\]/,/^\[/s/^[[:space:]]*'"$1"'[[:space:]]*=[[:space:]]*//p' "$2" |
    head -n 1 | tr -d '\r'
}
if [ -z "${AWS_ACCESS_KEY_ID:-}" ] && [ -n "${AWS_SHARED_CREDENTIALS_FILE:-}" ]; then
  AWS_ACCESS_KEY_ID=$(key_of aws_access_key_id "$AWS_SHARED_CREDENTIALS_FILE")
  AWS_SECRET_ACCESS_KEY=$(key_of aws_secret_access_key "$AWS_SHARED_CREDENTIALS_FILE")
fi
if [ -z "${AWS_ACCESS_KEY_ID:-}" ] || [ -z "${AWS_SECRET_ACCESS_KEY:-}" ]; then
  echo "s3-upload: no keys: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" \
       "or AWS_SHARED_CREDENTIALS_FILE" >&2
  exit 1
fi
region=${AWS_REGION:-us-east-1}
count=0
for file in "$dir"/*; do
  [ -f "$file" ] || continue
  url="$endpoint/$bucket/$prefix$(basename "$file")"
  printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" |
    curl --config - --silent --show-error --fail --retry 5 \
      --header "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
      --aws-sigv4 "aws:amz:$region:s3" --upload-file "$file" "$url" > /dev/null ||
    { echo "s3-upload: PUT $url failed" >&2; exit 1; }
  count=$((count + 1))
done
[ "$count" -gt 0 ] || { echo "s3-upload: no files in $dir" >&2; exit 1; }
echo "s3-upload: $count objects to $endpoint/$bucket/$prefix"
