#include "server/service/auth.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/text_file.h"

namespace batchd::server {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

// Whether `a` equals `b`, in time that depends only on their lengths, so
// that response times do not tell how much of a guess was right.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat(
      why,
      ": batchd requires `authorization: Bearer <token>` with a token from "
      "its --auth-token-file (batchd clients read it from a token file or "
      "$BATCHD_TOKEN)"));
}

}  // namespace

absl::StatusOr<TokenSet> TokenSet::Parse(absl::string_view text,
                                         absl::string_view source) {
  TokenSet set;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(source, " line ", line_number);
    if (fields.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has ", fields.size(),
          " fields; write a token, optionally followed by one job name"));
    }
    if (fields[0].size() < kMinTokenChars) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the token has ", fields[0].size(),
          " characters; use at least ", kMinTokenChars,
          " (e.g. `openssl rand -hex 16`)"));
    }
    for (const Entry& entry : set.entries_) {
      if (entry.token == fields[0]) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " repeats a token; each token may appear once"));
      }
    }
    set.entries_.push_back(
        {std::string(fields[0]),
         Caller{fields.size() == 2 ? std::string(fields[1]) : "",
                absl::StrCat("token on line ", line_number,
                             " of --auth-token-file")}});
  }
  if (set.entries_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " holds no token; write one per line (`token [job]`)"));
  }
  return set;
}

absl::StatusOr<TokenSet> TokenSet::ReadFile(const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadTextFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat("--auth-token-file: ", text.status().message()));
  }
  return Parse(*text, absl::StrCat("--auth-token-file ", path));
}

absl::StatusOr<Caller> TokenSet::Find(absl::string_view token) const {
  const Caller* found = nullptr;
  for (const Entry& entry : entries_) {
    if (ConstantTimeEquals(entry.token, token)) found = &entry.caller;
  }
  if (found == nullptr) return Unauthenticated("the token is not accepted");
  return *found;
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(
    const std::string& token_file) {
  auto authorizer = std::make_unique<Authorizer>();
  authorizer->token_file_ = token_file;
  if (absl::Status loaded = authorizer->Reload(); !loaded.ok()) return loaded;
  return authorizer;
}

absl::Status Authorizer::Reload() {
  if (token_file_.empty()) return absl::OkStatus();
  absl::StatusOr<TokenSet> tokens = TokenSet::ReadFile(token_file_);
  if (!tokens.ok()) return tokens.status();
  auto shared = std::make_shared<const TokenSet>(*std::move(tokens));
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(shared);
  return absl::OkStatus();
}

absl::StatusOr<Caller> Authorizer::Authenticate(
    absl::string_view authorization) const {
  if (!required()) return Caller{};
  std::shared_ptr<const TokenSet> tokens;
  {
    absl::MutexLock lock(&mu_);
    tokens = tokens_;
  }
  if (authorization.empty()) return Unauthenticated("the call has no token");
  if (!absl::StartsWith(authorization, kBearer)) {
    return Unauthenticated("the authorization metadata is not a bearer token");
  }
  return tokens->Find(authorization.substr(kBearer.size()));
}

absl::StatusOr<Caller> Authorizer::AuthenticateHttp(
    absl::string_view authorization) const {
  constexpr absl::string_view kBasic = "Basic ";
  if (!absl::StartsWith(authorization, kBasic)) {
    return Authenticate(authorization);
  }
  std::string decoded;
  if (!absl::Base64Unescape(authorization.substr(kBasic.size()), &decoded)) {
    return Unauthenticated("the Basic credentials are not base64");
  }
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) {
    return Unauthenticated("the Basic credentials have no password");
  }
  return Authenticate(absl::StrCat(kBearer, decoded.substr(colon + 1)));
}

absl::StatusOr<Caller> Authorizer::Authenticate(
    const grpc::ServerContextBase& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return Authenticate(absl::string_view());
  return Authenticate(absl::string_view(it->second.data(), it->second.size()));
}

absl::Status CheckJob(const Caller& caller, absl::string_view job) {
  if (caller.job.empty() || caller.job == job) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "this token may only stream for job \"", caller.job, "\", not \"", job,
      "\"; set the plan's job to \"", caller.job,
      "\" or use the token given for this job"));
}

absl::Status CheckAdmin(const Caller& caller, absl::string_view rpc) {
  if (caller.job.empty()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, " changes the daemon for every job; it needs a token bound to no "
           "job, and this one is bound to job \"",
      caller.job, "\""));
}

}  // namespace batchd::server
