#include "server/storage/s3_credentials.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace batchd::server {

absl::StatusOr<S3Credentials> ParseCredentialsFile(absl::string_view text,
                                                   absl::string_view file,
                                                   absl::string_view profile) {
  S3Credentials creds;
  bool in_profile = false;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      in_profile = absl::StripAsciiWhitespace(
                       line.substr(1, line.size() - 2)) == profile;
      found = found || in_profile;
      continue;
    }
    if (!in_profile) continue;
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    std::string key =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (key == "aws_access_key_id") creds.access_key = value;
    if (key == "aws_secret_access_key") creds.secret_key = value;
    if (key == "aws_session_token") creds.session_token = value;
  }
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(
        "credentials file ", file, " has no [", profile, "] profile"));
  }
  if (creds.access_key.empty() != creds.secret_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "credentials file ", file, ", profile [", profile,
        "]: aws_access_key_id and aws_secret_access_key go together"));
  }
  return creds;
}

absl::StatusOr<S3Credentials> LoadS3Credentials(
    const std::string& credentials_file) {
  if (!credentials_file.empty()) {
    std::ifstream in(credentials_file);
    if (!in) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot read the credentials file ", credentials_file));
    }
    std::stringstream text;
    text << in.rdbuf();
    return ParseCredentialsFile(text.str(), credentials_file, "default");
  }
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  S3Credentials creds;
  creds.access_key = env("AWS_ACCESS_KEY_ID");
  creds.secret_key = env("AWS_SECRET_ACCESS_KEY");
  creds.session_token = env("AWS_SESSION_TOKEN");
  if (creds.access_key.empty() != creds.secret_key.empty()) {
    return absl::InvalidArgumentError(
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together: set both or "
        "neither");
  }
  return creds;
}

}  // namespace batchd::server
