// Bearer-token checks for every batchd RPC except grpc.health.v1.Health.
//
// TokenSet is the parsed --auth-token-file: one token per line, optionally
// followed by the one job name it may stream for:
//
//   # comments and blank lines are ignored
//   4f1c0d6e9a2b7c3d5e8f0a1b2c3d4e5f              any job, and SetWorkers
//   9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d  resnet-a    only job "resnet-a"
//
// Authorizer holds the current TokenSet (or none: no token is required) and
// answers, for a call's `authorization` metadata, who is calling. It is
// reloaded from its file on SIGHUP; calls in progress keep the answer they
// got. Tokens are compared in constant time and never appear in a message,
// a log line or a metric.
//
// Thread-safe.
#ifndef BATCHD_SERVER_SERVICE_AUTH_H_
#define BATCHD_SERVER_SERVICE_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_context.h"

namespace batchd::server {

// The shortest token accepted, characters: a guessable token is no check.
inline constexpr size_t kMinTokenChars = 16;

// Who presented a token.
struct Caller {
  // The job the token is bound to; empty: any job, and administration.
  std::string job;
  // Which token, for per-identity limits and their messages, without the
  // secret: "token on line 3 of --auth-token-file". Empty when no token is
  // required (the caller is then known by its peer host).
  std::string identity;
};

class TokenSet {
 public:
  // Parses the file format above. INVALID_ARGUMENT naming `source` and the
  // line for a token shorter than kMinTokenChars, a line with more than two
  // fields, a repeated token, or no token at all.
  static absl::StatusOr<TokenSet> Parse(absl::string_view text,
                                        absl::string_view source);
  static absl::StatusOr<TokenSet> ReadFile(const std::string& path);

  // The caller whose token is `token`; UNAUTHENTICATED when none matches.
  // Every entry is compared, in full, whatever matches.
  absl::StatusOr<Caller> Find(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string token;
    Caller caller;
  };
  std::vector<Entry> entries_;
};

class Authorizer {
 public:
  // No token required.
  Authorizer() = default;
  // Tokens from `token_file`; empty `token_file`: none required. Reads the
  // file now: the error names it and the line that is wrong.
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(
      const std::string& token_file);

  // Reads the token file again; on error keeps the current tokens and says
  // why. OK, doing nothing, when no file was given.
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);

  // Whether calls must carry a token.
  bool required() const { return !token_file_.empty(); }

  // The caller of a call with `authorization` metadata (empty when absent):
  // UNAUTHENTICATED when a token is required and the value is missing, not
  // "Bearer <token>", or no accepted token. A Caller with no job when no
  // token is required.
  absl::StatusOr<Caller> Authenticate(absl::string_view authorization) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same for an HTTP request's `Authorization` header (the metrics
  // port under --metrics-auth), which may also be "Basic <base64 of
  // user:token>" so that a browser can ask for the token as a password; the
  // user name is ignored.
  absl::StatusOr<Caller> AuthenticateHttp(absl::string_view authorization)
      const ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a gRPC call's metadata.
  absl::StatusOr<Caller> Authenticate(
      const grpc::ServerContextBase& context) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::string token_file_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const TokenSet> tokens_ ABSL_GUARDED_BY(mu_);
};

// PERMISSION_DENIED unless `caller` may stream for `job`.
absl::Status CheckJob(const Caller& caller, absl::string_view job);
// PERMISSION_DENIED unless `caller` may change the daemon (SetWorkers): a
// token bound to a job may only stream and read.
absl::Status CheckAdmin(const Caller& caller, absl::string_view rpc);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_AUTH_H_
