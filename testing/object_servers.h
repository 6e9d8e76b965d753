// Object servers for the remote-dataset tests, started and stopped by the
// tests themselves on loopback ports:
//
//   StartNginx(root)  Debian's nginx serving `root` over HTTP and HTTPS
//                     (a certificate made at start by
//                     scripts/make_test_certs.sh), with byte ranges, ETags
//                     and If-Match.
//   StartS3rver(dir)  the npm package s3rver (testing/s3rver/package.json)
//                     with SigV4 signatures checked (s3rver/s3_server.js),
//                     buckets made at start; put objects with S3PutObject.
//
//   ASSERT_OK_AND_ASSIGN(auto nginx, StartNginx(MakeTempDir("www")));
//   std::string url = nginx->url() + "/train-000.tar";
//
// Each server is a child process with its own temporary directory (its
// config, log and certificate); destroying the handle stops it. A server
// also dies with the test process (PR_SET_PDEATHSIG). Thread-compatible.
#ifndef BATCHD_TESTING_OBJECT_SERVERS_H_
#define BATCHD_TESTING_OBJECT_SERVERS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd::testing {

// The credentials s3rver accepts (its built-in account).
inline constexpr char kS3rverAccessKey[] = "S3RVER";
// Not s3rver's own secret (the same word as its key id): a secret that
// leaked into a log or a page would not hide behind the key id.
inline constexpr char kS3rverSecretKey[] = "batchd-test-secret-6c1f9e";
inline constexpr char kS3rverRegion[] = "us-east-1";

class ObjectServer {
 public:
  ~ObjectServer();  // SIGTERM, then SIGKILL after 2 s
  ObjectServer(const ObjectServer&) = delete;
  ObjectServer& operator=(const ObjectServer&) = delete;

  // "http://127.0.0.1:<port>": nginx's HTTP root, or s3rver's endpoint.
  std::string url() const;
  int port() const { return port_; }
  // nginx only: "https://localhost:<https_port>", whose certificate
  // `ca_file()` verifies. Empty for s3rver.
  std::string https_url() const;
  int https_port() const { return https_port_; }
  std::string ca_file() const { return ca_file_; }
  // The server's own log (nginx's error log, s3rver's output).
  std::string Log() const;

 private:
  friend absl::StatusOr<std::unique_ptr<ObjectServer>> StartNginx(
      const std::string& root_dir);
  friend absl::StatusOr<std::unique_ptr<ObjectServer>> StartS3rver(
      const std::string& dir, const std::vector<std::string>& buckets);
  ObjectServer() = default;

  pid_t pid_ = -1;
  int port_ = 0;
  int https_port_ = 0;
  std::string ca_file_;
  std::string log_path_;
};

// nginx (/usr/sbin/nginx, one process, not a daemon) serving `root_dir` on
// 127.0.0.1 over HTTP and HTTPS. Waits up to 10 s until both ports accept.
// FAILED_PRECONDITION when nginx or openssl is not installed.
absl::StatusOr<std::unique_ptr<ObjectServer>> StartNginx(
    const std::string& root_dir);

// s3rver keeping its objects under `dir`, on 127.0.0.1, with `buckets`
// made at start: path style at url() (http://127.0.0.1:<port>/<bucket>/<key>),
// virtual-host style at http://s3.localhost:<port> (requests to
// http://<bucket>.s3.localhost:<port>/<key>; libcurl resolves *.localhost
// to the loopback itself). Every request must be signed (SigV4) by
// kS3rverAccessKey / kS3rverSecretKey; others get 403 as from S3
// (SignatureDoesNotMatch, InvalidAccessKeyId, AccessDenied).
// Waits up to 20 s until it listens. FAILED_PRECONDITION when node or the
// package (installed by the build from testing/s3rver/package-lock.json)
// is missing.
absl::StatusOr<std::unique_ptr<ObjectServer>> StartS3rver(
    const std::string& dir, const std::vector<std::string>& buckets);

// PUT `bytes` as s3://`bucket`/`key` at `endpoint` (path style), signed
// with SigV4 for `region` by `access_key`/`secret_key`.
absl::Status S3PutObject(const std::string& endpoint,
                         const std::string& bucket, const std::string& key,
                         absl::string_view bytes,
                         const std::string& access_key = kS3rverAccessKey,
                         const std::string& secret_key = kS3rverSecretKey,
                         const std::string& region = kS3rverRegion);

}  // namespace batchd::testing

#endif  // BATCHD_TESTING_OBJECT_SERVERS_H_
